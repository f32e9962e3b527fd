"""Warm kernels: what a zygote preloads, and how the kernels it forks are kept (tests/pipeline/test_warm.py
grades with them).

The kernels here run unsandboxed (the sandbox's own tests are in test_isolation.py and the pipeline
tests): what is checked is the zygote's part, which holds with or without the sandbox.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from autograder.course import assignments
from autograder.execution import warm
from autograder.execution import zygote as zygote_module
from autograder.execution.kernel import SandboxedKernelManager
from autograder.isolation import sandbox
from tests.unit.test_reaper import alive

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="keepers and /proc are Linux's")


def test_preload_modules_are_the_notebooks_top_level_imports():
    modules = warm.preload_modules(assignments()["01_tensors"])
    assert {"torch", "numpy", "dlkit", "ipykernel.kernelapp"} <= set(modules)
    assert "tensorflow" not in modules
    assert "torch._dynamo" in modules and "onnxscript" not in modules, "what torch, not ONNX, imports on first use"
    assert "tensorflow" in warm.preload_modules(assignments()["05_tf1_vs_tf2"])
    whole_class = warm.preload_modules(assignments()["01_tensors"], assignments()["05_tf1_vs_tf2"])
    assert set(modules) | {"tensorflow"} <= set(whole_class), "one zygote serves every assignment of the class"


FILE_LIMIT = 2**30 + 4096  # an odd value, so that the kernels' limit is seen to be the zygote's


@pytest.fixture(scope="module")
def zygote():
    """A zygote of the kind the run's driver starts, reached by address as a worker reaches it."""
    started = warm.Zygote.spawn(("ipykernel.kernelapp",), rlimits={"RLIMIT_FSIZE": FILE_LIMIT})
    started.ready()
    warm.activate((), address=started.address)
    yield started
    warm.deactivate()
    started.close()


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def wait_until(condition, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


async def run_in_kernel(code: str, **sandbox) -> tuple[SandboxedKernelManager, str]:
    """Start a kernel from the active zygote (sandboxed as `sandbox`, SandboxedKernelManager's settings, says),
    run `code`, return the manager and what it printed."""
    printed: list[dict] = []
    km = SandboxedKernelManager(**sandbox)
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        await kc.wait_for_ready(timeout=60)
        reply = await kc.execute_interactive(code, timeout=60, output_hook=printed.append)
        assert reply["content"]["status"] == "ok", reply["content"]
    finally:
        kc.stop_channels()
    text = "".join(m["content"].get("text", "") for m in printed if m["msg_type"] == "stream")
    return km, text


DETACH = """
import os, subprocess, sys
child = os.fork()
if child == 0:  # a double fork in a new session: the sleep outlives its parent
    os.setsid()
    print(subprocess.Popen(["sleep", "300"]).pid, flush=True)
    os._exit(0)
os.waitpid(child, 0)
"""


@linux_only
def test_what_a_forked_kernel_detaches_is_kept_by_its_keeper_and_killed_when_the_kernel_dies(zygote):
    km, text = asyncio.run(run_in_kernel(DETACH))
    sleep = int(text.split()[-1])
    kernel = km.provisioner.process
    try:
        assert alive(sleep) and parent_of(sleep) == kernel.keeper.pid, \
            "the keeper, the kernel's subreaper, adopts what the kernel's children detach"
        kernel.kill()  # as the grader does once the last cell ran: the keeper must end what the kernel left
        assert wait_until(lambda: not alive(sleep)), f"sleep {sleep} outlived its kernel"
        assert wait_until(lambda: not kernel.keeper.is_running() or kernel.keeper.status() == "zombie"), \
            "the keeper leaves once nothing is left to keep"
        assert kernel.poll() is not None
    finally:
        warm.kill_kernels()
        if alive(sleep):
            os.kill(sleep, 9)


@linux_only
def test_kill_kernels_ends_a_running_kernel_with_everything_below_its_keeper(zygote):
    km, text = asyncio.run(run_in_kernel(DETACH))
    sleep, kernel = int(text.split()[-1]), km.provisioner.process
    try:
        warm.kill_kernels()
        assert wait_until(lambda: not alive(sleep) and not alive(kernel.pid), 5)
        assert kernel.poll() is not None
        assert warm.spared() == {zygote.server} and alive(zygote.server), "the zygote serves the next submission"
    finally:
        if alive(sleep):
            os.kill(sleep, 9)


@linux_only
@pytest.mark.skipif(sandbox.unavailable_reason() is not None, reason=f"no sandbox: {sandbox.unavailable_reason()}")
def test_a_sandboxed_kernel_dies_with_its_keeper_when_the_whole_run_is_killed(zygote):
    """A run killed as a whole (SIGTERM to its process group: `timeout`, a cancelled CI job) takes the zygote
    and the keepers with it, but not the kernels, which are in sessions of their own. An unsandboxed ipykernel
    sees its parent change and leaves; a sandboxed one, PID 1 of its own namespace, sees no parent at all."""
    doomed = warm.Zygote.spawn(("ipykernel.kernelapp",))
    workdir = sandbox.make_workdir()
    try:
        doomed.ready()
        warm.activate((), address=doomed.address)
        km, _ = asyncio.run(run_in_kernel("print('up')", sandbox_workdir=str(workdir),
                                          sandbox_keep=[str(p) for p in sandbox.default_keep()]))
        kernel = km.provisioner.process
        for pid in (doomed.server, kernel.keeper.pid):  # the group's signal, as the zygote and keeper get it
            os.kill(pid, 9)
        assert wait_until(lambda: not alive(kernel.pid), 5), f"kernel {kernel.pid} outlived its keeper"
    finally:
        warm.kill_kernels()
        doomed.close()
        shutil.rmtree(workdir, ignore_errors=True)
        warm.activate((), address=zygote.address)


def _socket_inodes(pid: int) -> set[str]:
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:"):
            found.add(target)
    return found


@linux_only
def test_a_forked_kernel_holds_none_of_the_zygotes_sockets(zygote):
    """A kernel that held the zygote's listening socket could take other workers' requests, or ask for a kernel
    outside the sandbox: the keeper and the kernel close every descriptor they inherit."""
    km, _ = asyncio.run(run_in_kernel("pass"))
    kernel = km.provisioner.process
    try:
        zygote_sockets = _socket_inodes(zygote.server)
        assert zygote_sockets, "the zygote listens on a socket (else the test proves nothing)"
        assert not zygote_sockets & _socket_inodes(kernel.pid)
        assert not zygote_sockets & _socket_inodes(kernel.keeper.pid)
    finally:
        warm.kill_kernels()


@linux_only
@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user needs root")
def test_the_zygote_answers_only_its_own_user(zygote):
    """A sandboxed kernel runs as a uid of its own: even if it could reach the socket, it gets no kernel."""
    assert (Path(zygote.address).parent.stat().st_mode & 0o777) == 0o700
    child = os.fork()
    if child == 0:  # another user asks for a kernel outside any sandbox
        code = 1
        try:
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.connect(zygote.address)
            code = 2  # the folder let it through
        except PermissionError:
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "another user reached the zygote's socket"
    # Past the folder, the zygote itself checks who asks (SO_PEERCRED): connected through a copy of the socket's
    # path where anyone may connect, another user is refused before the zygote reads any request.
    with tempfile.TemporaryDirectory() as open_folder:
        os.chmod(open_folder, 0o755)
        link = Path(open_folder) / "socket"
        os.link(zygote.address, link)
        os.chmod(link, 0o777)
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            try:
                os.setresgid(65534, 65534, 65534)
                os.setresuid(65534, 65534, 65534)
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                    conn.connect(str(link))
                    os.write(write_end, conn.makefile("rb").readline() or b"(closed)")
            except BaseException as err:  # noqa: BLE001 - reported to the test
                os.write(write_end, repr(err).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        os.waitpid(child, 0)
        with os.fdopen(read_end, "rb") as answer:
            reply = answer.read()
    assert b'"pid"' not in reply and b"another user" in reply, reply


@linux_only
def test_kernels_run_under_the_limits_the_zygote_was_started_with(zygote):
    """The driver starts the zygote, not a worker: the workers' limits must reach its kernels all the same."""
    km, text = asyncio.run(run_in_kernel("import resource; print(resource.getrlimit(resource.RLIMIT_FSIZE))"))
    try:
        assert text.strip() == f"({FILE_LIMIT}, {FILE_LIMIT})"
    finally:
        warm.kill_kernels()


@linux_only
def test_a_kernel_collects_its_own_garbage_but_never_walks_the_zygotes_objects(zygote):
    """The zygote imports with the collector off and freezes what it holds before forking: a kernel's full
    collection must not walk (and copy on write) every object of torch and TensorFlow, yet it must collect
    the cycles its own code makes."""
    code = ("import gc, weakref\n"
            "class Node: pass\n"
            "a = Node(); a.me = a; gone = weakref.ref(a); del a\n"
            "gc.collect()\n"
            "print(gc.isenabled(), gc.get_freeze_count() > 1000, gone() is None)")
    km, text = asyncio.run(run_in_kernel(code))
    try:
        assert text.split() == ["True", "True", "True"], text
    finally:
        warm.kill_kernels()


def _keepers(zygote) -> set[int]:
    return {p.pid for p in psutil.Process(zygote.server).children()}


@linux_only
def test_a_silent_or_departed_client_costs_the_others_nothing(zygote):
    """A connection that never sends its request is dropped after REQUEST_SECONDS, and a worker that gave up
    waiting (it then starts a cold kernel) is left with no kernel of the zygote's running for nobody."""
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.connect(zygote.address)
    try:
        started = time.monotonic()
        km, _ = asyncio.run(run_in_kernel("pass"))  # queued behind the silent connection
        assert time.monotonic() - started < zygote_module.REQUEST_SECONDS + 30
        warm.kill_kernels()
    finally:
        silent.close()
    before = _keepers(zygote)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as departed:
        departed.connect(zygote.address)
        with tempfile.TemporaryDirectory() as folder:
            request = {"connection_file": f"{folder}/kernel.json", "env": dict(os.environ), "cwd": folder}
            socket.send_fds(departed, [(json.dumps(request) + "\n").encode()], [2])
    assert wait_until(lambda: _keepers(zygote) <= before, 5), "a kernel was left for a worker that had gone"


@linux_only
def test_a_kernel_is_forked_once_what_its_notebook_needs_is_in_not_all_the_zygote_imports(zygote, tmp_path):
    """The zygote imports the run's modules in the order the submissions come; a kernel whose notebook needs
    only the first ones starts while the rest load, and a request that names none waits for everything."""
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(8)\n")
    started = warm.Zygote.spawn(("ipykernel.kernelapp", "slow_to_import"), env={"PYTHONPATH": str(tmp_path)})
    ask = "import gc, sys; print('slow_to_import' in sys.modules, gc.isenabled())"
    try:
        started.wait_listening()  # as the driver does before it starts the workers
        warm.activate((), address=started.address, needs=("ipykernel.kernelapp", "numpy"))
        begun = time.monotonic()
        _, text = asyncio.run(run_in_kernel(ask))
        assert warm.active() is not None, "the kernel was forked, not started cold"
        assert text.split()[0] == "False" and time.monotonic() - begun < 7, "it waited for what it does not need"
        assert text.split()[1] == "True", "forked while the zygote imports with its collector off, the kernel collects"
        warm.kill_kernels()
        warm.activate((), address=started.address, needs=None)
        _, text = asyncio.run(run_in_kernel(ask))
        assert text.split() == ["True", "True"], "a request naming no modules is answered once all are in"
        assert started.ready() == ["ipykernel.kernelapp", "slow_to_import"]
    finally:
        warm.kill_kernels()
        started.close()
        warm.activate((), address=zygote.address)


@linux_only
def test_what_a_waiting_request_needs_is_imported_before_the_rest(tmp_path):
    """A zygote asked for a kernel that needs a module listed late imports that one next (the worker's
    submission is not the one the run's order foresaw), not everything listed before it."""
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(8)\n")
    started = warm.Zygote.spawn(("ipykernel.kernelapp", "slow_to_import", "json"), env={"PYTHONPATH": str(tmp_path)})
    request = {"connection_file": str(tmp_path / "kernel.json"), "env": {}, "cwd": None, "sandbox_spec": None,
               "modules": ["ipykernel.kernelapp", "json"]}
    try:
        started.wait_listening()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:  # asked while ipykernel loads
            conn.settimeout(60)
            conn.connect(started.address)
            socket.send_fds(conn, [(json.dumps(request) + "\n").encode()], [sys.stderr.fileno()])
            reply = json.loads(conn.makefile("rb").readline())
        assert reply["loaded"] == ["ipykernel.kernelapp", "json"], "json came before slow_to_import"
    finally:
        for pid in (reply.get("keeper"), reply.get("pid")) if "reply" in locals() else ():
            if pid:
                os.kill(pid, 9)
        started.close()


@linux_only
def test_a_zygote_with_a_plan_imports_only_what_the_next_kernels_need(zygote, tmp_path):
    """With a plan (warm.import_plan), what only a later kernel needs waits until the kernels before it are asked
    for: a long import must not stand between a worker and a kernel the zygote could fork at once."""
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(3)\n")
    plan = {"ahead": 1, "at": {"0": ["ipykernel.kernelapp"], "1": ["slow_to_import"]}}
    started = warm.Zygote.spawn(("ipykernel.kernelapp", "slow_to_import"), env={"PYTHONPATH": str(tmp_path)},
                                plan=plan)
    try:
        started.wait_listening()
        time.sleep(5)  # long enough for both imports, were they made at once
        warm.activate((), address=started.address, needs=("ipykernel.kernelapp",))
        _, text = asyncio.run(run_in_kernel("import sys; print('slow_to_import' in sys.modules)"))
        assert warm.active() is not None and text.split() == ["False"], "it imported what no kernel asked for yet"
        assert started.ready() == ["ipykernel.kernelapp", "slow_to_import"], "then what the next kernel needs"
    finally:
        warm.kill_kernels()
        started.close()
        warm.activate((), address=zygote.address)


def _ask(address: str, request: object, timeout: float = 30) -> dict:
    """One raw request to a zygote; its reply."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        conn.connect(address)
        socket.send_fds(conn, [(json.dumps(request) + "\n").encode()], [sys.stderr.fileno()])
        return json.loads(conn.makefile("rb").readline() or b"{}")


@linux_only
def test_a_zygote_survives_a_malformed_request_and_a_plan_never_strands_one_that_names_no_modules(tmp_path):
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(1)\n")
    plan = {"ahead": 1, "at": {"0": ["ipykernel.kernelapp"], "1": ["slow_to_import"]}}
    started = warm.Zygote.spawn(("ipykernel.kernelapp", "slow_to_import"), env={"PYTHONPATH": str(tmp_path)},
                                plan=plan)
    pids = []
    try:
        started.wait_listening()
        for malformed in ({"modules": 5}, ["not", "an", "object"], {"modules": [1, 2]}):
            assert "error" in _ask(started.address, malformed), malformed
        request = {"connection_file": str(tmp_path / "kernel.json"), "env": {}, "cwd": None, "sandbox_spec": None,
                   "modules": None}  # waits for everything, though the plan has slow_to_import for a later kernel
        reply = _ask(started.address, request)
        pids = [reply.get("keeper"), reply.get("pid")]
        assert reply.get("loaded") == ["ipykernel.kernelapp", "slow_to_import"], reply
    finally:
        for pid in pids:
            if pid:
                os.kill(pid, 9)
        started.close()
