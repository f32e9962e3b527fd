"""Run a student's kernel where it can reach neither the network, nor anything it must not read, nor other kernels.

The grader starts each kernel as
    unshare --mount --net --pid --fork -- python autograder/isolation/sandbox.py SPEC.json -- <kernel command>
so this module runs as root, as PID 1 of a fresh PID namespace, inside fresh mount and network
namespaces (a warm kernel forked by zygote.py gets the same namespaces from unshare_namespaces). It
1. hides the instructor sources, the grader's files, the git history, the class's submissions
   and the grading outputs under empty tmpfs mounts (and any folder on the way to the Python
   interpreter that other users cannot enter, such as /root);
2. binds back what the kernel needs: its own working folder, the interpreter, the helper package;
3. mounts a /proc of its own PID namespace, so the kernel sees, signals and traces only its own
   processes (`os.kill(-1, ...)` included), and none of another kernel's or the grader's;
4. brings up the namespace's own loopback (local sockets work, nothing leaves the machine);
5. caps the number of processes and threads, then drops to an unprivileged user of its own (one
   uid per grading worker, so two kernels graded at once never share one) with no capabilities and
   no way to regain them, so it cannot unmount what hides the rest, read root's files or signal
   the grader;
6. runs the kernel, which talks to the grader over IPC sockets in its working folder.
The kernel itself is PID 1 of its namespace: the grader's SIGINT reaches it (Python handles SIGINT),
SIGKILL from outside always does, and when it dies the kernel kills every process left in the
namespace. Processes it did not start itself but adopted (detached grandchildren) stay zombies until
then, which the process cap counts.
This file runs as a script inside the namespaces, so it imports only the standard library.
Only util-linux's `unshare` (present on every Linux) is needed. Where it is missing, or the
grader is not root, `unavailable_reason()` says why and the grader warns and runs unsandboxed.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

#: Kernels run as KERNEL_UID_BASE + the grading worker's pid: no user of the system, and different for
#: every worker running at the same time, so each kernel's process cap counts its own processes only.
KERNEL_UID_BASE = 1_000_000_000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
_CLONE_NEWNS, _CLONE_NEWPID, _CLONE_NEWNET = 0x00020000, 0x20000000, 0x40000000
_PR_SET_NO_NEW_PRIVS = 38
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


@lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why kernels cannot be sandboxed here, or None when they can.

    Past the obvious checks, it sandboxes a trivial command exactly as it will sandbox a kernel, so a
    system that refuses any step (a PID namespace, mounting /proc, the loopback, switching user) is
    found here, once, rather than by every kernel dying.
    """
    if not sys.platform.startswith("linux"):
        return "kernel isolation needs Linux namespaces"
    if os.geteuid() != 0:
        return "kernel isolation needs the grader to run as root (to create namespaces and switch user)"
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed"
    workdir = make_workdir()
    try:
        probe = subprocess.run(wrap(["true"], write_spec(workdir, [], [], processes=64)), capture_output=True,
                               text=True, timeout=60)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if probe.returncode != 0:
        return f"this system refuses the sandbox: {probe.stderr.strip() or f'exit status {probe.returncode}'}"
    return None


def kernel_uid() -> int:
    """The uid of the kernels this grading worker starts (see KERNEL_UID_BASE)."""
    return KERNEL_UID_BASE + os.getpid()


def write_spec(workdir: Path, hide: list[Path], keep: list[Path], processes: int) -> Path:
    """Write what the sandbox hides and keeps, its uid and process cap into the workdir, readable by root
    only; return its path."""
    spec = workdir / ".sandbox.json"
    spec.write_text(json.dumps({"workdir": str(workdir), "hide": [str(p) for p in hide],
                                "keep": [str(p) for p in keep], "uid": kernel_uid(), "processes": processes}))
    spec.chmod(0o600)
    return spec


def wrap(kernel_cmd: list[str], spec: Path) -> list[str]:
    """The command that runs `kernel_cmd` in new namespaces, sandboxed as `spec` says."""
    return ["unshare", "--mount", "--net", "--pid", "--fork", "--", sys.executable, str(Path(__file__).resolve()),
            str(spec), "--", *kernel_cmd]


def default_keep() -> list[Path]:
    """What a kernel needs to see: the interpreter, the virtual environment, the helper package and its data."""
    from autograder.paths import DATA, SRC  # here, not on top: this file also runs as a script, outside the package

    return [Path(sys.base_prefix), Path(sys.prefix), SRC, DATA]


def default_hide() -> list[Path]:
    """What no kernel may see: instructor sources, grader, build products, history."""
    from autograder.paths import AUTOGRADER, BUILD, NOTEBOOKS, REPO

    return [NOTEBOOKS, AUTOGRADER, BUILD, *git_dirs(REPO), REPO / "tests", Path(tempfile.gettempdir())]


def git_dirs(repo: Path) -> list[Path]:
    """Where the repository's history lives: .git, and in a `git worktree` also the main .git its file points to."""
    dot_git = repo / ".git"
    if not dot_git.is_file():
        return [dot_git]
    gitdir = Path(dot_git.read_text().partition("gitdir:")[2].strip())  # <main>/.git/worktrees/<name>
    return [dot_git, (repo / gitdir).resolve().parent.parent]


def make_workdir() -> Path:
    """A fresh folder the sandboxed kernel owns and works in.

    It sits directly in the temp folder because the kernel's IPC sockets live in it, and a Unix
    socket path may not exceed 108 bytes: a deep output folder would stop the kernel starting.
    The rest of the temp folder is hidden from the kernel (see default_hide).
    """
    workdir = Path(tempfile.mkdtemp(prefix="kit-"))
    os.chown(workdir, kernel_uid(), kernel_uid())
    return workdir


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    if _libc().mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                     data.encode() if data else None) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount {source} on {target}: {os.strerror(err)}")


def _closed_ancestors(path: Path) -> list[Path]:
    """Folders above `path` that other users cannot enter."""
    return [p for p in path.parents if p != Path("/") and not os.stat(p).st_mode & 0o001]


def loopback_up() -> None:
    """Bring up the namespace's loopback interface, as `ip link set lo up` would (iproute2 may not be installed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh22x", b"lo", 0)  # struct ifreq: the name, then ifr_flags
        flags = struct.unpack_from("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | _IFF_UP))


def _enter(spec: dict) -> None:
    """Steps 1-5 of the module docstring, in this (root) process, PID 1 of its namespace."""
    keep = [Path(p) for p in [spec["workdir"], *spec["keep"]] if Path(p).exists()]
    hide = {Path(p) for p in spec["hide"] if Path(p).exists()}
    for path in keep:
        hide.update(_closed_ancestors(path))
    handles = {path: os.open(path, os.O_PATH) for path in keep}
    for path in sorted(hide, key=lambda p: len(p.parts)):
        if any(parent in hide for parent in path.parents):  # a hidden parent hides it already
            continue
        if path.is_dir():
            _mount("tmpfs", str(path), "tmpfs", 0, "size=64k,mode=0755")
        else:  # a file, such as a worktree's .git
            _mount("/dev/null", str(path), None, _MS_BIND, None)
    for path, fd in handles.items():
        if any(parent in hide for parent in [path, *path.parents]):
            path.mkdir(parents=True, exist_ok=True)
            _mount(f"/proc/self/fd/{fd}", str(path), None, _MS_BIND | _MS_REC, None)
        os.close(fd)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    loopback_up()
    resource.setrlimit(resource.RLIMIT_NPROC, (spec["processes"], spec["processes"]))  # counts threads too
    uid = spec["uid"]
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def unshare_namespaces() -> None:
    """Move this (single-threaded, root) process into new mount and network namespaces, and its next
    child into a new PID namespace, as `unshare --mount --net --pid` would.

    Used where the kernel is forked rather than started through the `unshare` command (see zygote.py):
    the child forked next is PID 1 of the new namespace. Mounts are made private first, so nothing
    mounted here shows up outside.
    """
    if _libc().unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)


def private_env(workdir: str) -> dict[str, str]:
    """Where the kernel keeps its files: its own folder, whatever the grader's environment says.

    Libraries cache under paths taken from the environment (torch's compile caches default to
    /tmp/torchinductor_<user>, and a process that once compiled exports that path), and in the
    sandbox only the kernel's own folder is writable. The kernel's uid has no passwd entry, so the
    user name (getpass.getuser(), which torch's caches ask for) comes from the environment too.
    """
    return {"HOME": workdir, "USER": "student", "LOGNAME": "student", "TMPDIR": workdir,
            "IPYTHONDIR": f"{workdir}/.ipython", "MPLCONFIGDIR": f"{workdir}/.matplotlib",
            "XDG_CACHE_HOME": f"{workdir}/.cache", "TORCHINDUCTOR_CACHE_DIR": f"{workdir}/.cache/torchinductor",
            "TRITON_CACHE_DIR": f"{workdir}/.cache/triton"}


def enter(spec_path: str) -> str:
    """Sandbox this process as the spec file says (steps 1-5) and move into its workdir; return the workdir."""
    spec = json.loads(Path(spec_path).read_text())
    _enter(spec)
    os.chdir(spec["workdir"])
    return spec["workdir"]


def main(argv: list[str]) -> None:
    spec_path, sep, *kernel_cmd = argv
    assert sep == "--" and kernel_cmd, "usage: python -m autograder.isolation.sandbox SPEC.json -- KERNEL COMMAND"
    os.execvpe(kernel_cmd[0], kernel_cmd, dict(os.environ, **private_env(enter(spec_path))))


if __name__ == "__main__":
    main(sys.argv[1:])
