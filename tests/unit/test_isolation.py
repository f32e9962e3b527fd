"""Kernels graded at the same time cannot reach one another, and one submission cannot exhaust the machine.

Each sandboxed kernel is PID 1 of a PID namespace of its own and runs as a uid of its own under a
process cap (autograder/isolation/sandbox.py); memory is capped per process by RLIMIT_DATA, which leaves the
address space CUDA reserves alone (autograder/isolation/limits.py). Here the sandbox and the limits
run a few lines of Python; tests/pipeline/test_isolation.py grades hostile submissions with them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from autograder.isolation import sandbox
from autograder.paths import REPO

needs_sandbox = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                   reason=f"no sandbox here: {sandbox.unavailable_reason()}")


def run_sandboxed(code: str, env: dict[str, str], processes: int = 64) -> subprocess.CompletedProcess:
    """`python -c code` in a sandbox as a kernel gets it (cold path), under `env`."""
    workdir = sandbox.make_workdir()
    try:
        spec = sandbox.write_spec(workdir, sandbox.default_hide(), sandbox.default_keep(), processes)
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
