"""Kernels graded at the same time cannot reach one another, and one submission cannot exhaust the machine.

Each sandboxed kernel is PID 1 of a PID namespace of its own, in a root file system built from an
allowlist, with an allowlisted environment and a private capped scratch, as a uid of its own under a
process cap (autograder/isolation/sandbox.py); memory is capped per process by RLIMIT_DATA, which leaves
the address space CUDA reserves alone (autograder/isolation/limits.py), and per kernel by the watchdog
(autograder/isolation/watchdog.py). Here the sandbox and the limits run a few lines of Python, in both
modes where the machine allows: `root` (a root grader) and `user` (an ordinary user's grader, through a
user namespace; a root test process can take that path too). tests/pipeline/test_isolation.py grades
hostile submissions with them, also as an ordinary user.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autograder.isolation import cgroups, sandbox
from autograder.isolation.watchdog import Watchdog
from autograder.paths import REPO

needs_sandbox = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                   reason=f"no sandbox here: {sandbox.unavailable_reason()}")
#: The modes this machine can test: both as root (a root process may also take the user-namespace path).
MODES = (["root", "user"] if os.geteuid() == 0 else ["user"]) if sandbox.sandbox_mode() else []
SECRETS = {"AWS_SECRET_ACCESS_KEY": "kit-unit-aws", "PGPASSWORD": "kit-unit-pg", "GITHUB_TOKEN": "kit-unit-gh"}


def run_sandboxed(code: str, env: dict[str, str], processes: int = 64, mode: str | None = None,
                  scratch_bytes: int = 2**30, cgroup: Path | None = None) -> subprocess.CompletedProcess:
    """`python -c code` in a sandbox as a kernel gets it (cold path), under `env`."""
    workdir = sandbox.make_workdir(mode)
    try:
        spec = sandbox.write_spec(workdir, sandbox.default_keep(), processes, scratch_bytes, mode, cgroup)
        return subprocess.run(sandbox.wrap([sys.executable, "-c", code], spec), capture_output=True, text=True,
                              env=env, timeout=120)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@needs_sandbox
def test_sandbox_starts_with_a_loopback_where_no_ip_program_exists(tmp_path):
    # A PATH on which only `unshare` exists: the sandbox may not run `ip` (GPU images often lack iproute2).
    only_unshare = tmp_path / "bin"
    only_unshare.mkdir()
    (only_unshare / "unshare").symlink_to(shutil.which("unshare"))
    code = textwrap.dedent("""
        import os, socket
        server = socket.create_server(("127.0.0.1", 0))
        socket.create_connection(server.getsockname(), timeout=5).sendall(b"hello")
        print("pid", os.getpid(), "uid", os.getuid(),
              "procs", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
              "got", server.accept()[0].recv(5).decode())
    """)
    proc = run_sandboxed(code, {"PATH": str(only_unshare)})
    assert proc.returncode == 0, proc.stderr
    assert "got hello" in proc.stdout, proc.stdout
    assert "pid 1 " in proc.stdout and "procs [1]" in proc.stdout, "its own PID namespace and /proc"
    assert f"uid {sandbox.kernel_uid()} " in proc.stdout, proc.stdout


@pytest.mark.parametrize("mode", MODES)
def test_a_kernel_sees_only_its_allowlist(mode, tmp_path):
    """No project checkout, class, OUT, other home or /srv: the kernel's root is built from an allowlist, so a
    place nobody thought of hiding is not there either. Nor the grader's credentials, in os.environ or in the
    process's first environment block."""
    elsewhere = tmp_path / "srv-course-private"
    elsewhere.mkdir()
    (elsewhere / "solutions.txt").write_text("the answers")
    elsewhere.chmod(0o755)
    code = textwrap.dedent(f"""
        import os, pathlib
        import dlkit, numpy  # the helper package and the virtual environment are there
        places = [{str(elsewhere)!r}, {str(REPO / "autograder")!r}, {str(REPO / "notebooks")!r},
                  {str(REPO / ".git")!r}, {str(REPO / "tests")!r}, {str(REPO / "build")!r}, "/etc/shadow",
                  "/root/.bashrc", "/var/log", "/var/lib", "/srv", "/opt", "/run"]
        print("seen", [p for p in places if os.path.exists(p)])
        print("passwd", open("/etc/passwd").read().count(":x:"))
        block = open("/proc/self/environ", "rb").read().decode()
        print("env", sorted(k for k in {list(SECRETS)!r} if k in os.environ or k in block))
        print("processes", [p for p in os.listdir("/proc") if p.isdigit()])
    """)
    proc = run_sandboxed(code, {**os.environ, **SECRETS}, mode=mode)
    assert proc.returncode == 0, proc.stderr
    assert "seen []" in proc.stdout, proc.stdout
    assert "passwd 3" in proc.stdout, "its own /etc/passwd: root, student, nobody"
    assert "env []" in proc.stdout, proc.stdout
    assert "processes ['1']" in proc.stdout, proc.stdout


@pytest.mark.parametrize("mode", MODES)
def test_a_kernel_signals_reach_only_its_own_processes_and_it_has_no_network(mode):
    outside = subprocess.Popen(["sleep", "60"])
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        code = textwrap.dedent(f"""
            import os, signal, socket, subprocess
            child = subprocess.Popen(["sleep", "60"])
            os.kill(-1, signal.SIGKILL)  # every process it may signal
            print("child", child.wait())
            try:
                os.kill({outside.pid}, signal.SIGKILL)
                print("reached the grader's process")
            except ProcessLookupError:
                pass
            try:
                socket.create_connection(("127.0.0.1", {listener.getsockname()[1]}), timeout=3)
                print("reached the host's loopback")
            except OSError:
                print("no network")
            print("uid", os.getuid())
        """)
        proc = run_sandboxed(code, dict(os.environ), mode=mode)
        assert proc.returncode == 0, proc.stderr
        assert "child -9" in proc.stdout and "no network" in proc.stdout and "reached" not in proc.stdout, proc.stdout
        assert outside.poll() is None, "a process outside the sandbox was killed"
        expected_uid = sandbox.kernel_uid("root") if mode == "root" else sandbox.USER_MODE_UID
        assert f"uid {expected_uid}" in proc.stdout, "an unprivileged uid, never root"
    finally:
        outside.kill()
        listener.close()


@pytest.mark.parametrize("mode", MODES)
def test_scratch_is_private_capped_in_total_and_gone_with_the_kernel(mode):
    code = textwrap.dedent("""
        import errno, os
        chunk = b"x" * (3 * 2**20)
        written = []
        for place in ("/tmp", "/var/tmp", "/dev/shm", os.environ["HOME"]):
            try:
                with open(f"{place}/kit-unit-scratch", "wb") as f:
                    f.write(chunk)
                written.append(place)
            except OSError as err:
                print("stopped at", place, errno.errorcode[err.errno])
        print("written", written, "cwd", os.getcwd())
    """)
    env = {**sandbox.private_env(), **os.environ}
    proc = run_sandboxed(code, env, mode=mode, scratch_bytes=8 * 2**20)
    assert proc.returncode == 0, proc.stderr
    assert "written ['/tmp', '/var/tmp']" in proc.stdout and "stopped at /dev/shm ENOSPC" in proc.stdout, proc.stdout
    assert f"cwd {sandbox.KERNEL_HOME}" in proc.stdout
    for place in ("/tmp", "/var/tmp", "/dev/shm"):
        assert not os.path.exists(f"{place}/kit-unit-scratch"), f"the kernel's file outlived it in the host's {place}"


def can_make_cgroups() -> bool:
    """Whether this grader may make a memory cgroup (the probe group is removed at once)."""
    probe = cgroups.create(f"probe-{os.getpid()}", 2**30)
    if probe is not None:
        cgroups.remove(probe)
    return probe is not None


@pytest.mark.skipif("root" not in MODES or not can_make_cgroups(),
                    reason="a memory cgroup needs a root grader and a writable cgroup hierarchy")
def test_a_root_graders_kernel_is_held_by_its_memory_cgroup_shared_memory_included():
    group = cgroups.create(f"unit-{os.getpid()}", 200 * 2**20)
    try:
        code = "import mmap\nm = mmap.mmap(-1, 600 * 2**20)\nfor i in range(0, len(m), 4096): m[i] = 1\nprint('kept')"
        proc = run_sandboxed(code, dict(os.environ), mode="root", cgroup=group)
        assert proc.returncode != 0 and "kept" not in proc.stdout, "600 MiB of shared memory under a 200 MiB group"
        assert cgroups.oom_killed(group)
    finally:
        cgroups.remove(group)
    assert not group.exists()


@pytest.mark.skipif("root" not in MODES or not can_make_cgroups(),
                    reason="a memory cgroup needs a root grader and a writable cgroup hierarchy")
def test_the_groups_a_workers_kernels_left_are_removed_and_no_one_elses():
    mine, others = cgroups.create(f"kernel-{os.getpid()}-7", 2**30), cgroups.create("kernel-1-7", 2**30)
    try:
        cgroups.remove_left(f"kernel-{os.getpid()}-")
        assert not mine.exists() and others.exists()
    finally:
        cgroups.remove(mine)
        cgroups.remove(others)


def test_the_kernel_environment_is_an_allowlist():
    env = {"PATH": "/usr/bin", "LC_ALL": "C.UTF-8", "DLKIT_DEVICES": "cpu", "OMP_NUM_THREADS": "1",
           "CUDA_VISIBLE_DEVICES": "0", "NBGRADER_EXECUTION": "autograde", **SECRETS, "HF_HOME": "/data/hf",
           sandbox.PASS_ENV: "HF_HOME"}
    assert sandbox.kernel_env(env) == {"PATH": "/usr/bin", "LC_ALL": "C.UTF-8", "DLKIT_DEVICES": "cpu",
                                       "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "0",
                                       "NBGRADER_EXECUTION": "autograde", "HF_HOME": "/data/hf",
                                       sandbox.PASS_ENV: "HF_HOME"}
    assert sandbox.kernel_env(sandbox.kernel_env(env)) == sandbox.kernel_env(env), "filtering twice keeps passed names"


def test_the_watchdog_kills_a_kernel_whose_processes_share_more_memory_than_the_limit(tmp_path):
    """Shared mappings escape RLIMIT_DATA; the watchdog sums the processes' proportional set sizes instead."""
    code = "import mmap, time\nm = mmap.mmap(-1, 300 * 2**20)\nm.write(b'x' * (300 * 2**20))\ntime.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    watchdog = Watchdog(proc.pid, 150 * 2**20, None, 0, proc.kill)
    try:
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert watchdog.tripped and "past the limit of 150 MiB" in watchdog.tripped, watchdog.tripped
    finally:
        proc.kill()
        watchdog.stop()


def test_the_watchdog_kills_a_kernel_that_fills_its_working_folder(tmp_path):
    code = f"import time\nopen({str(tmp_path / 'big')!r}, 'wb').write(b'x' * (8 * 2**20))\ntime.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code])
    watchdog = Watchdog(proc.pid, 2**40, tmp_path, 4 * 2**20, proc.kill)
    try:
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert "working folder" in watchdog.tripped
    finally:
        proc.kill()
        watchdog.stop()


def test_a_quiet_kernel_is_left_alone(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1.5)"])
    watchdog = Watchdog(proc.pid, 2**30, tmp_path, 2**20, proc.kill)
    assert proc.wait(timeout=30) == 0 and watchdog.tripped is None
    watchdog.stop()


def test_the_grader_refuses_to_run_student_code_unsandboxed_unless_told(tmp_path):
    """Fail closed: where kernels cannot be sandboxed (here: no `unshare` on the PATH), nothing is graded, and
    the message says what to change; --allow-unsandboxed grades with a warning."""
    env = {**os.environ, "PATH": str(tmp_path)}  # the grader itself is started by absolute path
    refused = subprocess.run([sys.executable, "-m", "autograder.grade", str(tmp_path), str(tmp_path / "out")],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "cannot be sandboxed" in refused.stderr, refused.stderr
    assert "unshare is not installed" in refused.stderr and "--allow-unsandboxed" in refused.stderr
    allowed = subprocess.run([sys.executable, "-m", "autograder.grade", str(tmp_path), str(tmp_path / "out"),
                              "--allow-unsandboxed"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert "WARNING: --allow-unsandboxed" in allowed.stderr, allowed.stderr
    assert "no <student>/<assignment>/ folders" in allowed.stderr, "it went on to look for submissions"


@needs_sandbox
def test_the_process_cap_stops_forking_inside_the_sandbox():
    code = textwrap.dedent("""
        import os, time
        for forked in range(200):  # bounded: a test never runs an unbounded fork loop
            try:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
            except BlockingIOError:
                break
        print("forked", forked)
    """)
    proc = run_sandboxed(code, dict(os.environ), processes=40)
    assert proc.returncode == 0, proc.stderr
    assert "forked 39" in proc.stdout, "the cap counts the kernel itself: 39 children"


def test_the_memory_limit_leaves_reservations_alone_but_stops_a_big_allocation():
    # What CUDA, NCCL and JAX do at start: reserve tens of GiB of address space they do not touch.
    code = textwrap.dedent("""
        import mmap
        import numpy as np
        from autograder.isolation.limits import Limits, apply_process_limits
        assert apply_process_limits(Limits()) == []
        reservation = mmap.mmap(-1, 64 * 2**30, flags=mmap.MAP_PRIVATE, prot=0)  # PROT_NONE
        print("reserved", len(reservation) // 2**30, "GiB")
        try:
            np.ones(12 * 2**30 // 8)
        except MemoryError:
            print("MemoryError")
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["reserved", "64", "GiB", "MemoryError"], proc.stdout
