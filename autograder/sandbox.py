"""Run a student's kernel where it can reach neither the network nor anything it must not read.

The grader starts each kernel as
    unshare --mount --net --fork -- python -m autograder.sandbox SPEC.json -- <kernel command>
so this module runs as root inside fresh mount and network namespaces. It
1. hides the instructor sources, the grader's files, the git history, the class's submissions
   and the grading outputs under empty tmpfs mounts (and any folder on the way to the Python
   interpreter that other users cannot enter, such as /root);
2. binds back what the kernel needs: its own working folder, the interpreter, the helper package;
3. brings up the namespace's own loopback (local sockets work, nothing leaves the machine);
4. drops to an unprivileged user with no capabilities and no way to regain them, so it cannot
   unmount what hides the rest, read root's files or signal the grader;
5. runs the kernel, which talks to the grader over IPC sockets in its working folder.
This file runs as a script inside the namespaces, so it imports only the standard library.
Only util-linux's `unshare` (present on every Linux) is needed. Where it is missing, or the
grader is not root, `unavailable_reason()` says why and the grader warns and runs unsandboxed.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path

SANDBOX_UID = SANDBOX_GID = 65534  # "nobody"
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_CLONE_NEWNS, _CLONE_NEWNET = 0x00020000, 0x40000000
_PR_SET_NO_NEW_PRIVS = 38


@lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why kernels cannot be sandboxed here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return "kernel isolation needs Linux namespaces"
    if os.geteuid() != 0:
        return "kernel isolation needs the grader to run as root (to create namespaces and switch user)"
    if shutil.which("unshare") is None:
        return "util-linux's unshare is not installed"
    probe = subprocess.run(["unshare", "--mount", "--net", "--fork", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"this system refuses new namespaces: {probe.stderr.strip()}"
    return None


def write_spec(workdir: Path, hide: list[Path], keep: list[Path]) -> Path:
    """Write what the sandbox hides and keeps into the workdir, readable by root only; return its path."""
    spec = workdir / ".sandbox.json"
    spec.write_text(json.dumps({"workdir": str(workdir), "hide": [str(p) for p in hide],
                                "keep": [str(p) for p in keep]}))
    spec.chmod(0o600)
    return spec


def wrap(kernel_cmd: list[str], spec: Path) -> list[str]:
    """The command that runs `kernel_cmd` in new namespaces, sandboxed as `spec` says."""
    return ["unshare", "--mount", "--net", "--fork", "--", sys.executable, str(Path(__file__).resolve()), str(spec),
            "--", *kernel_cmd]


def default_keep() -> list[Path]:
    """What a kernel needs to see: the interpreter, the virtual environment, the helper package and its data."""
    repo = Path(__file__).resolve().parent.parent
    return [Path(sys.base_prefix), Path(sys.prefix), repo / "src", repo / "data"]


def default_hide() -> list[Path]:
    """What no kernel may see: instructor sources, grader, build products, history."""
    repo = Path(__file__).resolve().parent.parent
    return [repo / "notebooks", repo / "autograder", repo / "build", *git_dirs(repo), repo / "tests",
            Path(tempfile.gettempdir())]


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
    os.chown(workdir, SANDBOX_UID, SANDBOX_GID)
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


def _enter(spec: dict) -> None:
    """Steps 1-4 of the module docstring, in this (root) process."""
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
    subprocess.run(["ip", "link", "set", "lo", "up"], check=False, capture_output=True)
    os.setgroups([])
    os.setresgid(SANDBOX_GID, SANDBOX_GID, SANDBOX_GID)
    os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
    if _libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


def unshare_namespaces() -> None:
    """Move this (single-threaded, root) process into new mount and network namespaces, as `unshare` would.

    Used where the kernel is forked rather than started through the `unshare` command (see zygote.py).
    Mounts are made private first, so nothing mounted here shows up outside.
    """
    if _libc().unshare(_CLONE_NEWNS | _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare: {os.strerror(err)}")
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE, None)


def private_env(workdir: str) -> dict[str, str]:
    """Where the kernel keeps its files: its own folder, whatever the grader's environment says.

    Libraries cache under paths taken from the environment (torch's compile caches default to
    /tmp/torchinductor_<user>, and a process that once compiled exports that path), and in the
    sandbox only the kernel's own folder is writable.
    """
    return {"HOME": workdir, "TMPDIR": workdir, "IPYTHONDIR": f"{workdir}/.ipython",
            "MPLCONFIGDIR": f"{workdir}/.matplotlib", "XDG_CACHE_HOME": f"{workdir}/.cache",
            "TORCHINDUCTOR_CACHE_DIR": f"{workdir}/.cache/torchinductor", "TRITON_CACHE_DIR": f"{workdir}/.cache/triton"}


def enter(spec_path: str) -> str:
    """Sandbox this process as the spec file says (steps 1-4) and move into its workdir; return the workdir."""
    spec = json.loads(Path(spec_path).read_text())
    _enter(spec)
    os.chdir(spec["workdir"])
    return spec["workdir"]


def main(argv: list[str]) -> None:
    spec_path, sep, *kernel_cmd = argv
    assert sep == "--" and kernel_cmd, "usage: python -m autograder.sandbox SPEC.json -- KERNEL COMMAND"
    os.execvpe(kernel_cmd[0], kernel_cmd, dict(os.environ, **private_env(enter(spec_path))))


if __name__ == "__main__":
    main(sys.argv[1:])
