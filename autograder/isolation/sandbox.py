"""Run a student's kernel where it sees only what it needs: no network, no other process, no file of the
TA, the class or the course beyond the interpreter and the helper package.

The grader starts each kernel as
    unshare [--user --map-root-user] --mount --net --pid --ipc --fork -- python sandbox.py SPEC.json -- <kernel>
(a warm kernel forked by zygote.py gets the same namespaces from unshare_namespaces), so this module
runs as root of its namespaces, as PID 1 of a fresh PID namespace, and
1. builds a new root file system from an allowlist, not by hiding a list of places: a small tmpfs
   holding read-only binds of the system's programs and libraries (/usr, /bin, /lib...), a few files
   of /etc (what Python, ssl, fonts and name lookup read), the interpreter and its virtual
   environment, the helper package and its data, the kernel's working folder (its IPC sockets), a
   /dev with the harmless devices (and the GPUs, where there are any), and a /proc of its own PID
   namespace; the old root is then detached (pivot_root), so no other home, /srv, /opt, the
   project checkout, the class, OUT or the gradebook exists for the kernel at all;
2. gives the kernel one private tmpfs, capped in size (Limits.scratch_bytes), behind /tmp,
   /var/tmp, /dev/shm and its HOME (its working directory too), gone with the namespace;
3. brings up the namespace's own loopback (local sockets work, nothing leaves the machine);
4. joins the kernel's memory cgroup where the grader made one (a root grader, cgroups.py), caps the
   processes and threads (RLIMIT_NPROC, counted per user namespace on Linux 5.14+), then
   drops every privilege: as root, to a uid of its own (one per grading worker) without
   capabilities; as an ordinary user, into a nested user namespace as uid 1000 without
   capabilities, whose mounts it may not change (they belong to the namespace above);
5. runs the kernel with an allowlisted environment (kernel_env), which talks to the grader over IPC
   sockets in its working folder.

Two modes, one layout: `root` where the grader runs as root (a VM, a container with the privileges
below), `user` where it runs as an ordinary user (a JupyterHub account, a laptop, a rootless
container) through an unprivileged user namespace. `sandbox_mode()` picks the first that works on
this system by trying it; `unavailable_reason()` says why neither does and what to change. The
grader refuses to run student code unsandboxed unless the TA says so (grade.py).

The kernel is PID 1 of its namespace: the grader's SIGINT reaches it, SIGKILL from outside always
does, and when it dies every process left in the namespace dies with it.
This file runs as a script inside the namespaces, so it imports only the standard library.
"""

from __future__ import annotations

import ctypes
import fcntl
import glob
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

#: Kernels of a root grader run as KERNEL_UID_BASE + the grading worker's pid: no user of the system, and
#: different for every worker running at the same time, so each kernel's process cap counts its own only.
KERNEL_UID_BASE = 1_000_000_000
#: The kernel's uid inside its nested user namespace when the grader is an ordinary user.
USER_MODE_UID = 1000
KERNEL_HOME = "/home/student"
#: What of /etc a kernel reads: name lookup of localhost, TLS roots, fonts, time zone, the dynamic loader's
#: cache and Debian's alternatives (/usr/bin/... links point into it). passwd and group are written anew.
ETC_ALLOWED = ("alternatives", "ssl", "ca-certificates", "ca-certificates.conf", "pki", "fonts", "localtime",
               "timezone", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "nsswitch.conf", "host.conf",
               "gai.conf", "mime.types", "protocols", "services", "os-release", "matplotlibrc")
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty")
#: Accelerators: NVIDIA (CUDA), AMD (ROCm), DRM render nodes, TPU and VFIO. Present only where the machine has them.
ACCELERATOR_GLOBS = ("/dev/nvidia*", "/dev/nvidia-caps", "/dev/dri", "/dev/kfd", "/dev/accel*", "/dev/vfio")
#: Processor topology, read by thread-pool sizing (glibc's CPU count, torch, TensorFlow); no secrets.
SYS_ALWAYS = ("/sys/devices/system/cpu", "/sys/devices/system/node")

#: The grader's environment a kernel may see: the kit's own variables (DLKIT_*), locale, thread counts, the
#: devices it may use, library settings that change results. Anything else (credentials, tokens, a database
#: password, the TA's paths) stays with the grader; the TA adds names with --pass-env.
ENV_ALLOWED = {"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONIOENCODING",
               "MPLBACKEND", "NVIDIA_TF32_OVERRIDE", "TF_FORCE_GPU_ALLOW_GROWTH", "TF_CPP_MIN_LOG_LEVEL",
               "TF_ENABLE_ONEDNN_OPTS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
               "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
               "CUDA_DEVICE_ORDER", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "PJRT_DEVICE", "XLA_FLAGS",
               "TPU_NAME", "COLAB_TPU_ADDR", "COLAB_RELEASE_TAG", "PYTORCH_NVML_BASED_CUDA_CHECK",
               "LD_LIBRARY_PATH", "JPY_PARENT_PID", "JPY_SESSION_NAME", "VIRTUAL_ENV",
               "NBGRADER_EXECUTION", "NBGRADER_VALIDATING"}  # nbgrader tells notebooks it is grading them
ENV_PREFIXES = ("LC_", "DLKIT_")
#: What Docker's defaults refuse the sandbox, and the flags that allow it (README "Isolation", Containerfile).
CONTAINER_FLAGS = ("--security-opt seccomp=unconfined", "--security-opt apparmor=unconfined",
                   "--security-opt systempaths=unconfined")
#: Names the TA passes through on top (grade.py --pass-env), comma-separated, in the grader's environment.
PASS_ENV = "KIT_KERNEL_PASS_ENV"

_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REMOUNT = 1, 2, 4, 8, 32
_MS_NOATIME, _MS_NODIRATIME, _MS_RELATIME, _ST_RELATIME = 1024, 2048, 1 << 21, 4096
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_MNT_DETACH = 2
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = (
    0x00020000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_PR_SET_NO_NEW_PRIVS, _PR_CAPBSET_DROP = 38, 24
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1


# --- choosing a mode (in the grader) -------------------------------------------------------------

@lru_cache(maxsize=1)
def _probe() -> tuple[str | None, str | None]:
    """(mode, None) for the first mode this system allows, else (None, why and what to change).

    A trivial command is sandboxed exactly as a kernel will be, so a system that refuses any step (a user
    namespace, mounting /proc or a tmpfs, the loopback, switching user) is found here, once, rather
    than by every kernel dying.
    """
    if not sys.platform.startswith("linux"):
        return None, "kernel isolation needs Linux namespaces"
    if shutil.which("unshare") is None:
        return None, ("util-linux's unshare is not installed (Debian/Ubuntu: apt-get install util-linux)\n"
                      + how_to_enable())
    failures = []
    for mode in (["root", "user"] if os.geteuid() == 0 else ["user"]):
        workdir = make_workdir(mode)
        try:
            probe = subprocess.run(wrap(["true"], write_spec(workdir, [], processes=64, mode=mode)),
                                   capture_output=True, text=True, timeout=60, env=kernel_env(dict(os.environ)))
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        if probe.returncode == 0:
            return mode, None
        failures.append(f"{mode} mode: {probe.stderr.strip()[-400:] or f'exit status {probe.returncode}'}")
    return None, "; ".join(failures) + "\n" + how_to_enable()


def sandbox_mode() -> str | None:
    """`root` or `user`: how kernels are sandboxed on this system; None where they cannot be."""
    return _probe()[0]


def unavailable_reason() -> str | None:
    """Why kernels cannot be sandboxed here and what to change, or None when they can."""
    return _probe()[1]


def how_to_enable() -> str:
    """What to change on this system so that an ordinary user may create the namespaces a kernel needs."""
    hints = []
    for setting, wanted in (("kernel/apparmor_restrict_unprivileged_userns", "0"),
                            ("kernel/unprivileged_userns_clone", "1")):
        try:
            value = Path(f"/proc/sys/{setting}").read_text().strip()
        except OSError:
            continue
        if value != wanted:
            hints.append(f"sudo sysctl -w {setting.replace('/', '.')}={wanted} (now {value})")
    try:
        if Path("/proc/sys/user/max_user_namespaces").read_text().strip() == "0":
            hints.append("sudo sysctl -w user.max_user_namespaces=15000 (now 0)")
    except OSError:
        pass
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists():
        hints.append(f"in a container, start it with {' '.join(CONTAINER_FLAGS)} (see the README's isolation "
                     f"section and the Containerfile)")
    hints.append("or, knowing that student code then runs with your rights, pass --allow-unsandboxed")
    return "To sandbox kernels: " + "; ".join(hints)


# --- what a kernel gets (in the grader) ----------------------------------------------------------

def kernel_uid(mode: str | None = None) -> int:
    """The uid, as this grader sees it, of the kernels this grading worker starts."""
    return KERNEL_UID_BASE + os.getpid() if (mode or sandbox_mode()) == "root" else os.geteuid()


def kernel_env(env: dict[str, str]) -> dict[str, str]:
    """The part of `env` a kernel may see (ENV_ALLOWED, ENV_PREFIXES, and the names in KIT_KERNEL_PASS_ENV)."""
    passed = {name.strip() for name in env.get(PASS_ENV, "").split(",") if name.strip()}
    return {name: value for name, value in env.items()
            if name in ENV_ALLOWED or name in passed or name == PASS_ENV or name.startswith(ENV_PREFIXES)}


def private_env() -> dict[str, str]:
    """Where a sandboxed kernel keeps its files: its private scratch, whatever the grader's environment says.

    Libraries cache under paths taken from the environment (torch's compile caches default to
    /tmp/torchinductor_<user>). The kernel's user has no name the libraries could ask the system for
    in every mode, so it comes from the environment too (getpass.getuser(), which torch's caches ask).
    """
    return {"HOME": KERNEL_HOME, "USER": "student", "LOGNAME": "student", "TMPDIR": "/tmp",
            "IPYTHONDIR": f"{KERNEL_HOME}/.ipython", "MPLCONFIGDIR": f"{KERNEL_HOME}/.matplotlib",
            "XDG_CACHE_HOME": f"{KERNEL_HOME}/.cache", "TORCHINDUCTOR_CACHE_DIR": f"{KERNEL_HOME}/.cache/torchinductor",
            "TRITON_CACHE_DIR": f"{KERNEL_HOME}/.cache/triton"}


def default_keep() -> list[Path]:
    """What a kernel needs to see besides the system: the interpreter, its virtual environment, the helper
    package and its data."""
    from autograder.paths import DATA, SRC  # here, not on top: this file also runs as a script, outside the package

    interpreter = Path(os.path.realpath(sys.executable)).parent.parent
    return [Path(sys.base_prefix), Path(sys.prefix), interpreter, SRC, DATA]


def make_workdir(mode: str | None = None) -> Path:
    """A fresh folder for the kernel's connection file and IPC sockets, owned by the kernel's user.

    It sits directly in the temp folder because a Unix socket path may not exceed 108 bytes: a deep
    output folder would stop the kernel starting. No other folder of the temp folder exists for the kernel.
    """
    workdir = Path(tempfile.mkdtemp(prefix="kit-"))
    if (mode or sandbox_mode()) == "root":
        os.chown(workdir, kernel_uid("root"), kernel_uid("root"))
    return workdir


def write_spec(workdir: Path, keep: list[Path], processes: int, scratch_bytes: int = 2**30,
               mode: str | None = None, cgroup: Path | None = None) -> Path:
    """Write what the sandbox shows the kernel, its user and caps (and the memory cgroup it joins, see
    cgroups.py) into the workdir (readable by the grader's user only); return its path."""
    mode = mode or sandbox_mode()
    spec = workdir / ".sandbox.json"
    spec.write_text(json.dumps({"mode": mode, "workdir": str(workdir), "keep": [str(p) for p in keep],
                                "uid": kernel_uid(mode) if mode == "root" else USER_MODE_UID,
                                "processes": processes, "scratch_bytes": scratch_bytes,
                                "cgroup": str(cgroup) if cgroup else None}))
    spec.chmod(0o600)
    return spec


def wrap(kernel_cmd: list[str], spec: Path) -> list[str]:
    """The command that runs `kernel_cmd` in new namespaces, sandboxed as `spec` says."""
    user = ["--user", "--map-root-user"] if json.loads(spec.read_text())["mode"] == "user" else []
    return ["unshare", *user, "--mount", "--net", "--pid", "--ipc", "--fork", "--", sys.executable,
            str(Path(__file__).resolve()), str(spec), "--", *kernel_cmd]


# --- inside the namespaces -----------------------------------------------------------------------

def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _check(_libc().mount(source.encode(), target.encode(), fstype.encode() if fstype else None, flags,
                         data.encode() if data else None), f"mount {source} on {target}")


def _bind(source: str, target: str, writable: bool = False, devices: bool = False, recursive: bool = True) -> None:
    """Bind `source` (a path or /proc/self/fd/N) on `target`, then make it read-only unless `writable`.

    The remount keeps the flags the source mount has (nosuid, nodev, noexec, its atime rule): in a user
    namespace those of a mount from the namespace above are locked, and changing one fails.
    """
    _mount(source, target, None, _MS_BIND | (_MS_REC if recursive else 0))
    have = os.statvfs(target).f_flag
    kept = have & (_MS_NOSUID | _MS_NODEV | _MS_NOEXEC | _MS_NOATIME | _MS_NODIRATIME)
    kept |= _MS_RELATIME if have & _ST_RELATIME else 0
    flags = _MS_BIND | _MS_REMOUNT | _MS_NOSUID | kept | (0 if writable else _MS_RDONLY) | (0 if devices else _MS_NODEV)
    _mount("none", target, None, flags)


def _place(root: str, path: str, is_dir: bool) -> str:
    """Create `path` inside the new root (a folder, or an empty file to bind a file on); return its full path."""
    target = root + path
    if is_dir:
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if not os.path.lexists(target):
            open(target, "w").close()
    return target


def _show(root: str, path: str, writable: bool = False, devices: bool = False) -> None:
    """Show the host's `path` at the same place in the new root: a link as the same link, else a bind."""
    if os.path.islink(path) and os.path.dirname(path) in ("/", "/etc"):
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        if not os.path.lexists(root + path):
            os.symlink(os.readlink(path), root + path)
        return
    if os.path.exists(path):
        _bind(path, _place(root, path, os.path.isdir(path)), writable, devices)


def _write(root: str, path: str, text: str) -> None:
    with open(_place(root, path, False), "w") as f:
        f.write(text)


def _build_root(spec: dict, root: str, workdir_fd: int) -> None:
    """Steps 1 and 2 of the module docstring: the allowlisted tree under `root` (a fresh tmpfs).

    Mounted in this order, so that nothing mounted later hides an earlier one: the system, /etc, /dev,
    the scratch (behind /tmp and the home), then what the kernel needs besides, which may lie in the
    host's /tmp (the workdir does).
    """
    for path in SYSTEM_DIRS:
        _show(root, path)
    for name in ETC_ALLOWED:
        _show(root, f"/etc/{name}")
    uid = spec["uid"]
    _write(root, "/etc/passwd", f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
                                f"student:x:{uid}:{uid}:student:{KERNEL_HOME}:/bin/sh\n"
                                f"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    _write(root, "/etc/group", f"root:x:0:\nstudent:x:{uid}:\nnogroup:x:65534:\n")
    _write(root, "/etc/hosts", "127.0.0.1 localhost\n::1 localhost ip6-localhost\n")
    _write(root, "/etc/hostname", "sandbox\n")
    # /dev: a tmpfs with the harmless devices, and the accelerators where there are any.
    _mount("tmpfs", _place(root, "/dev", True), "tmpfs", _MS_NOSUID, "size=64k,mode=0755")
    for name in DEVICE_NODES:
        _show(root, f"/dev/{name}", writable=True, devices=True)
    accelerators = [p for pattern in ACCELERATOR_GLOBS for p in glob.glob(pattern)]
    for path in accelerators:
        _show(root, path, writable=True, devices=True)
    for link, to in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                     ("stderr", "/proc/self/fd/2")):
        os.symlink(to, f"{root}/dev/{link}")
    for path in (["/sys"] if accelerators else list(SYS_ALWAYS)):  # GPU libraries read /sys/bus, /sys/class
        _show(root, path)
    # One private tmpfs, capped in total, behind /tmp, /var/tmp, /dev/shm and HOME.
    scratch = _place(root, "/.scratch", True)
    _mount("tmpfs", scratch, "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={spec['scratch_bytes']},mode=0755")
    for name, path, mode in (("tmp", "/tmp", 0o1777), ("var_tmp", "/var/tmp", 0o1777), ("shm", "/dev/shm", 0o1777),
                             ("home", KERNEL_HOME, 0o700)):
        os.mkdir(f"{scratch}/{name}", mode)
        os.chmod(f"{scratch}/{name}", mode)
        if spec["mode"] == "root":
            os.chown(f"{scratch}/{name}", uid, uid)
        _mount(f"{scratch}/{name}", _place(root, path, True), None, _MS_BIND)
    _check(_libc().umount2(scratch.encode(), _MNT_DETACH), "umount scratch")
    os.rmdir(scratch)
    kept = sorted({os.path.realpath(p) for p in spec["keep"] if os.path.exists(p)}, key=len)
    shown: list[str] = [p for p in SYSTEM_DIRS if os.path.isdir(p) and not os.path.islink(p)]
    for path in kept:
        if not any(path == s or path.startswith(s + "/") for s in shown):
            _show(root, path)
            shown.append(path)
    # Not recursive: the new root's own mount point lies in the workdir.
    _bind(f"/proc/self/fd/{workdir_fd}", _place(root, spec["workdir"], True), writable=True, recursive=False)
    os.close(workdir_fd)
    # Before the old root goes: in a user namespace, proc may be mounted only where a full /proc is visible.
    _mount("proc", _place(root, "/proc", True), "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)


def _pivot(root: str) -> None:
    """Make `root` the file system's root and detach the old one: nothing outside `root` stays reachable."""
    os.makedirs(f"{root}/.old", exist_ok=True)
    number = _SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"pivot_root: unknown machine {os.uname().machine}")
    _check(_libc().syscall(number, root.encode(), f"{root}/.old".encode()), "pivot_root")
    os.chdir("/")
    _check(_libc().umount2(b"/.old", _MNT_DETACH), "umount the old root")
    os.rmdir("/.old")
    _mount("none", "/", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)


def loopback_up() -> None:
    """Bring up the namespace's loopback interface, as `ip link set lo up` would (iproute2 may not be installed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh22x", b"lo", 0)  # struct ifreq: the name, then ifr_flags
        flags = struct.unpack_from("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh22x", b"lo", flags | _IFF_UP))


def _write_id_maps(inside: int, outside: int) -> None:
    """Map one uid and gid of the user namespace this process just entered."""
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{inside} {outside} 1")
    Path("/proc/self/gid_map").write_text(f"{inside} {outside} 1")


def _drop_capabilities() -> None:
    """No capabilities now, none to regain: empty bounding, permitted, effective and inheritable sets."""
    libc = _libc()
    for cap in range(64):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # EINVAL: past the last
            break
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable}, all zero
    _check(libc.capset(header, data), "capset")


def _drop_privileges(spec: dict) -> None:
    """Step 4 of the module docstring."""
    resource.setrlimit(resource.RLIMIT_NPROC, (spec["processes"], spec["processes"]))  # counts threads too
    if spec["mode"] == "root":
        uid = spec["uid"]
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)  # from root to a uid of its own: every capability goes
    else:  # root of a user namespace only: go one namespace down, as an ordinary uid there
        _check(_libc().unshare(_CLONE_NEWUSER), "unshare a nested user namespace")
        _write_id_maps(spec["uid"], 0)
        _drop_capabilities()
    _check(_libc().prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")


def _enter(spec: dict) -> None:
    """Steps 1-4 of the module docstring, in this process, PID 1 of its namespace and root of its namespaces."""
    if spec.get("cgroup"):  # the grader's memory group for this kernel (cgroups.py), joined while /sys is there
        with open(os.path.join(spec["cgroup"], "cgroup.procs"), "w") as f:
            f.write("0")
    _mount("none", "/", None, _MS_REC | _MS_PRIVATE)
    workdir_fd = os.open(spec["workdir"], os.O_PATH)
    root = tempfile.mkdtemp(prefix="kit-root-", dir=spec["workdir"])  # a mount point nobody else uses
    _mount("tmpfs", root, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=1m,mode=0755")
    _build_root(spec, root, workdir_fd)
    _pivot(root)
    loopback_up()
    _drop_privileges(spec)
    os.chdir(KERNEL_HOME)


def unshare_namespaces(mode: str) -> None:
    """Move this (single-threaded) process into the namespaces of a sandbox in `mode`, and its next child into
    a new PID namespace, as the `unshare` command of `wrap` would.

    Used where the kernel is forked rather than started through `unshare` (see zygote.py): the child
    forked next is PID 1 of the new namespace and calls `enter`.
    """
    uid, gid = os.geteuid(), os.getegid()
    flags = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWPID | _CLONE_NEWIPC
    _check(_libc().unshare(flags | (_CLONE_NEWUSER if mode == "user" else 0)), "unshare")
    if mode == "user":
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"0 {uid} 1")
        Path("/proc/self/gid_map").write_text(f"0 {gid} 1")


def enter(spec_path: str) -> None:
    """Sandbox this process as the spec file says (steps 1-4) and move into the kernel's home."""
    _enter(json.loads(Path(spec_path).read_text()))


def main(argv: list[str]) -> None:
    spec_path, sep, *kernel_cmd = argv
    assert sep == "--" and kernel_cmd, "usage: python sandbox.py SPEC.json -- KERNEL COMMAND"
    enter(spec_path)
    os.execvpe(kernel_cmd[0], kernel_cmd, {**kernel_env(dict(os.environ)), **private_env()})


if __name__ == "__main__":
    main(sys.argv[1:])
