"""dlkit.launch: real worker processes, from a module, a script's __main__ and a Jupyter kernel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import dlkit
from dlkit.launch import LaunchTimeout, WorkerError, free_port, launch

SRC = str(Path(dlkit.__file__).resolve().parent.parent)


def echo_env(rank, world_size, extra):
    return {"rank": rank, "world_size": world_size, "extra": extra, "pid": os.getpid(),
            "env": {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}}


def allreduce_worker(rank, world_size):
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    print(f"rank {rank} has {t.item()}")
    return t.item()


def raise_on_rank_one(rank, world_size):
    if rank == 1:
        raise ValueError("worker one is unhappy")
    time.sleep(30)  # rank 0 would wait for a peer that is gone: the launcher must kill it


def die_hard(rank, world_size):
    os._exit(7)


def hang_with_child(rank, world_size, folder):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(folder, f"pids-{rank}").write_text(f"{os.getpid()} {child.pid}")
    time.sleep(120)


def unpicklable_result(rank, world_size):
    return threading.Lock()


def alive(pid: int) -> bool:
    """True if pid runs (a zombie waiting for a non-reaping init counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    status = Path(f"/proc/{pid}/status")
    if status.exists():
        state = next((line for line in status.read_text().splitlines() if line.startswith("State:")), "")
        return "Z" not in state.split(":", 1)[1][:3]
    return True


def test_results_come_back_by_rank_with_torchrun_environment():
    results = launch(echo_env, 3, args=("hello",), timeout=60, echo=False)
    assert [r["rank"] for r in results] == [0, 1, 2]
    assert all(r["world_size"] == 3 and r["extra"] == "hello" for r in results)
    assert len({r["pid"] for r in results} | {os.getpid()}) == 4, "each rank runs in its own process"
    env = results[1]["env"]
    assert env["RANK"] == "1" and env["WORLD_SIZE"] == "3" and env["LOCAL_RANK"] == "1"
    assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
    assert len({r["env"]["MASTER_PORT"] for r in results}) == 1


def test_a_real_gloo_process_group_all_reduces(capsys):
    assert launch(allreduce_worker, 2, timeout=120) == [3.0, 3.0]
    out = capsys.readouterr().out
    assert "[rank 0] rank 0 has 3.0" in out and "[rank 1] rank 1 has 3.0" in out


def test_a_worker_that_raises_names_its_rank_and_stops_the_others():
    start = time.monotonic()
    with pytest.raises(WorkerError) as info:
        launch(raise_on_rank_one, 2, timeout=60, echo=False)
    assert time.monotonic() - start < 20, "the launcher must not wait for the other ranks to finish"
    assert info.value.rank == 1 and info.value.exc_type == "ValueError"
    assert "rank 1 of 2 raised ValueError: worker one is unhappy" in str(info.value)
    assert "raise_on_rank_one" in str(info.value), "the message shows the worker's traceback"


def test_a_worker_that_dies_without_a_result_is_reported():
    with pytest.raises(WorkerError, match="exited with code 7 without a result"):
        launch(die_hard, 2, timeout=60, echo=False)


def test_an_unpicklable_result_is_a_clear_error():
    with pytest.raises(WorkerError, match="cannot be sent back"):
        launch(unpicklable_result, 1, timeout=60, echo=False)


@pytest.mark.skipif(os.name != "posix", reason="process groups are POSIX")
def test_a_hanging_worker_is_killed_at_the_timeout_with_everything_it_started(tmp_path):
    start = time.monotonic()
    with pytest.raises(LaunchTimeout) as info:
        launch(hang_with_child, 2, args=(str(tmp_path),), timeout=4, echo=False)
    elapsed = time.monotonic() - start
    assert 4 <= elapsed < 15, f"timeout 4 s, but launch returned after {elapsed:.1f} s"
    assert info.value.ranks == [0, 1] and "still running after 4 s" in str(info.value)
    pids = [int(p) for f in tmp_path.glob("pids-*") for p in f.read_text().split()]
    assert len(pids) == 4, "both workers started a child before hanging"
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [p for p in pids if alive(p)], "orphaned processes left behind"


def test_lambdas_and_closures_travel_and_what_cannot_is_refused_up_front():
    assert launch(lambda rank, world_size: rank * 10, 2, timeout=60, echo=False) == [0, 10]
    offset = 5

    def nested(rank, world_size):
        return rank + offset

    assert launch(nested, 2, timeout=60, echo=False) == [5, 6]
    lock = threading.Lock()

    def holds_a_lock(rank, world_size):
        with lock:
            return rank

    with pytest.raises(TypeError, match="cannot be pickled"):
        launch(holds_a_lock, 2)
    with pytest.raises(ValueError):
        launch(echo_env, 0)


def test_free_port_is_bindable_on_loopback():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


SCRIPT = """
import torch, torch.distributed as dist, dlkit
from torch import nn

SCALE = 10.0
table = {"offset": 0.5}

def helper(t):
    return t * SCALE + table["offset"]

class Doubler(nn.Module):
    def forward(self, t):
        return 2 * t

def worker(rank, world_size, base):
    dist.init_process_group("gloo")
    t = Doubler()(helper(torch.tensor([rank + base])))
    dist.all_reduce(t)
    return t.item()

if __name__ == "__main__":
    print("RESULT", dlkit.launch(worker, 2, args=(1.0,), timeout=120, echo=False))
"""


def test_a_function_defined_in_main_with_notebook_helpers_works(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    # rank 0: 2 * (1 * 10 + 0.5) = 21, rank 1: 2 * (2 * 10 + 0.5) = 41
    assert "RESULT [62.0, 62.0]" in proc.stdout


def test_from_inside_a_jupyter_kernel(tmp_path):
    pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    from nbformat.v4 import new_code_cell, new_notebook

    cells = [
        "import sys; sys.path.insert(0, %r)\nimport dlkit, time" % SRC,
        textwrap.dedent(SCRIPT.split('if __name__')[0]),
        "print('RESULT', dlkit.launch(worker, 2, args=(1.0,), timeout=120, echo=False))",
        textwrap.dedent("""
            def broken(rank, world_size):
                if rank == 0:
                    raise KeyError('no such key')
                time.sleep(60)
            try:
                dlkit.launch(broken, 2, timeout=60, echo=False)
            except dlkit.WorkerError as err:
                print('ERROR', err.rank, err.exc_type)
        """),
    ]
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "RESULT [62.0, 62.0]" in text
    assert "ERROR 0 KeyError" in text


def leave_traces(rank, world_size, marker):
    """Reports what earlier launches left behind, then leaves traces of its own."""
    module = sys.modules["dlkit.launch"]  # `import dlkit.launch as` names the function dlkit re-exports
    seen = {"global": getattr(module, "_left_by_a_rank", None), "env": os.environ.get("DLKIT_TEST_TRACE")}
    module._left_by_a_rank = marker
    os.environ["DLKIT_TEST_TRACE"] = marker
    return {"seen": seen, "pid": os.getpid(), "parent": os.getppid()}


@pytest.mark.skipif(os.name != "posix", reason="the fork server is POSIX only")
def test_ranks_fork_from_one_server_and_share_nothing_between_launches():
    module = sys.modules["dlkit.launch"]

    first = launch(leave_traces, 2, args=("first",), timeout=60, echo=False, env={"DLKIT_TEST_TRACE": "given"})
    second = launch(leave_traces, 2, args=("second",), timeout=60, echo=False)
    server = module._fork_server()
    assert server is not None and alive(server)
    assert {r["parent"] for r in first + second} == {server}, "every rank is a child of the one server"
    assert len({r["pid"] for r in first + second}) == 4
    assert [r["seen"] for r in first] == [{"global": None, "env": "given"}] * 2
    assert [r["seen"] for r in second] == [{"global": None, "env": None}] * 2, \
        "a rank must not see what a rank of an earlier launch changed, nor an earlier launch's env"


@pytest.mark.skipif(os.name != "posix", reason="the fork server is POSIX only")
def test_a_dead_fork_server_is_replaced():
    module = sys.modules["dlkit.launch"]

    launch(echo_env, 1, args=(0,), timeout=60, echo=False)
    old = module._fork_server()
    os.kill(old, signal.SIGKILL)
    while alive(old):  # dead but not yet reaped: the launcher reaps it when it looks for its server
        time.sleep(0.01)
    assert [r["rank"] for r in launch(echo_env, 2, args=(1,), timeout=60, echo=False)] == [0, 1]
    assert module._fork_server() not in (None, old)


def test_without_a_fork_server_each_rank_is_a_fresh_interpreter(monkeypatch):
    module = sys.modules["dlkit.launch"]

    monkeypatch.setattr(module, "_fork_server", lambda: None)  # as where the stdlib has no forkserver
    results = launch(leave_traces, 2, args=("fresh",), timeout=120, echo=False)
    assert {r["parent"] for r in results} == {os.getpid()}, "without a server the launcher starts the ranks"
    assert launch(allreduce_worker, 2, timeout=120, echo=False) == [3.0, 3.0]
    with pytest.raises(WorkerError, match="exited with code 7 without a result"):
        launch(die_hard, 2, timeout=60, echo=False)


WHERE = """
import sys
sys.path.insert(0, %r)
import dlkit

def where(rank, world_size):
    return sys.modules["dlkit.launch"].__file__

if __name__ == "__main__":
    print("LAUNCHER", sys.modules["dlkit.launch"].__file__)
    print("RANKS", *dlkit.launch(where, 2, timeout=120, echo=False))
"""


def test_ranks_run_the_dlkit_the_launcher_imported_even_from_a_sys_path_changed_at_run_time(tmp_path):
    """A notebook may put a checkout first on sys.path while another dlkit is installed: the fork server
    must preload the launcher's, not the one the interpreter finds by default."""
    script = tmp_path / "script.py"
    script.write_text(WHERE % SRC)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["LAUNCHER"].startswith(SRC)
    assert lines["RANKS"].split() == [lines["LAUNCHER"]] * 2


def test_a_rank_imports_no_submodule_just_because_the_launcher_had_it():
    """cloudpickle would import in the rank torch.distributed.optim (imported here) for a function that uses `dist`
    and mentions `optim`; ranks that import it before their process group can hang (see launch._dumps)."""
    import torch.distributed as dist
    import torch.distributed.optim  # noqa: F401

    def uses_dist_optim(rank, world_size):
        if rank < 0:
            return dist.optim
        return "torch.distributed.optim" in sys.modules

    assert launch(uses_dist_optim, 1, timeout=60, echo=False) == [False]
