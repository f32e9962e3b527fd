"""Run one function in several processes, as `torchrun` would, from a script or a Jupyter cell.

    results = dlkit.launch(worker, world_size=2, args=(x, y), timeout=60)

starts `world_size` processes; process `rank` calls `worker(rank, world_size, *args, **kwargs)` and
`launch` returns the return values, one per rank, in rank order. Each process finds the environment
`torch.distributed.init_process_group` reads by default (MASTER_ADDR=127.0.0.1, MASTER_PORT=a free
port, RANK, WORLD_SIZE, LOCAL_RANK), so a worker written for `torchrun` runs unchanged.

Why not plain `multiprocessing`: it pickles a function by reference (module and name), and a
function defined in a notebook cell lives in `__main__`, which the new process cannot import; the
fork start method copies a process that may already run torch's thread pools, and can hang.
`launch` sends `fn`, `args` and `kwargs` with cloudpickle, which pickles what `__main__` defines
(functions, lambdas, classes, and the globals they use) by value and the rest by reference; the
processes themselves are ordinary `multiprocessing` processes. A script that calls `launch` must
do so under `if __name__ == "__main__":`, as any multiprocessing program: each rank imports the
script again (as `__mp_main__`) before it runs, as each rank of `torchrun` runs it (a notebook's
`__main__` is not run again).

Why a fork server (the stdlib's `forkserver` start method; `spawn` where there is none): a fresh
Python pays `import torch` (about 2 s) before its first line, on every rank of every launch. The
fork server is one helper process that imports torch's distributed stack once and then forks every
rank: a rank starts in a fraction of a second and still shares nothing with the launching process
or with other launches. What a process forks from must be idle and single-threaded, so the server
preloads modules only (see `_preload`): never `__main__` (the stdlib's default, which would run
the user's script or notebook again, tensor operations included), no tensor operation (the first
one starts torch's intra-op thread pool, which a forked child inherits as a lock held by a thread
that does not exist), no CUDA (a process forked after CUDA initialised cannot use it), and not
torch._dynamo. The preload is process-global and read only when the server starts; a process has one
stdlib fork server, so if something else started it first (Python 3.14 makes forkserver the default
start method), ranks fork from that one: they still work, and import what it did not preload.

Failures are loud and leave nothing behind: when a worker raises, the others are killed and
`WorkerError` names the rank and shows its traceback; past `timeout` seconds every worker is killed
and `LaunchTimeout` names the ranks still running. Each worker runs in its own process group, so
anything it started dies with it, and a worker exits by itself if the launching process goes away.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import signal
import socket
import sys
import tempfile
import threading
import time
import traceback
from importlib.util import find_spec
from multiprocessing import forkserver
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["launch", "free_port", "WorkerError", "LaunchTimeout"]

_PORT_IN_USE = ("EADDRINUSE", "Address already in use", "address already in use")
# Signs that a worker died in native code rather than raising in `fn`: worth one more try.
_NATIVE_CRASH = ("killed by signal", "terminate called")
_SERVER_LOCK = threading.Lock()


class WorkerError(RuntimeError):
    """A worker process raised or died; `rank` is the first rank that failed, `remote_traceback` its traceback."""

    def __init__(self, message: str, rank: int, remote_traceback: str = "", exc_type: str = ""):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback
        self.exc_type = exc_type


class LaunchTimeout(TimeoutError):
    """The workers did not all finish within the timeout; `ranks` were still running and were killed."""

    def __init__(self, message: str, ranks: Sequence[int]):
        super().__init__(message)
        self.ranks = list(ranks)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that is free right now: the operating system picks it (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _dumps(obj: Any) -> bytes:
    """cloudpickle.dumps, except that a function defined in `__main__` imports no submodule when unpickled.

    cloudpickle records, for each such function, every submodule the launcher has imported of a module
    the function uses whose name the function mentions, and imports them all in the rank: a notebook
    function that uses `dist` and says `nn` and `optim` gets its rank torch.distributed.nn and
    torch.distributed.optim (imported in the kernel by DDP's torch._dynamo). With torch 2.13 ranks that
    imported either before their process group existed hung in destroy_process_group, as with
    torch._dynamo (see `_preload`). A rank imports the modules `fn` names and what `fn` imports."""
    import cloudpickle  # here, not at the top: `import dlkit` must work where only launch needs it

    class Pickler(cloudpickle.Pickler):
        def _dynamic_function_reduce(self, func):
            reduced = super()._dynamic_function_reduce(func)
            reduced[2][1]["_cloudpickle_submodules"] = []  # (cls, args, (state, slotstate), ...)
            return reduced

    buffer = io.BytesIO()
    Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buffer.getvalue()


# ----------------------------------------------------------------------------- where ranks come from

def _preload() -> list[str]:
    """Modules the fork server imports before forking ranks: this module, and torch's distributed parts.

    Torch whenever it is installed, so that the server does not depend on what the launcher happened
    to import before its first launch (the preload is read once, when the server starts).
    Not torch._dynamo, although DistributedDataParallel's constructor imports it (about 1 s per rank):
    with torch 2.13, ranks that had it imported before their process group existed hung in 15 of 64
    small DDP launches (none of 76 without it). The rank's main thread, holding the GIL,
    destroys the gloo group and joins its worker thread, which is waiting for the GIL to free the
    Python context autograd stashed in the last all-reduce's thread-local state.
    """
    torch = ["torch", "torch.distributed", "torch.nn.parallel", "torch.utils.data"] if find_spec("torch") else []
    return [__name__, *torch]


def _fork_server() -> int | None:
    """Start the stdlib fork server if it is not running (again, if it died); its pid, None where there is none.

    The server inherits the launcher's environment when it starts, and two variables are set for
    that moment only. PYTORCH_NVML_BASED_CUDA_CHECK: torch asks NVML, not the CUDA runtime, whether
    a GPU is there (a rank forked after cudaGetDeviceCount cannot use CUDA). PYTHONPATH: the
    launcher's sys.path, so that the preload imports the modules the launcher would (Python 3.11's
    server ignores the sys.path it is given; a notebook that put a checkout first on sys.path would
    get its ranks a stale dlkit from the installed one)."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return None
    with _SERVER_LOCK:
        forkserver.set_forkserver_preload(_preload())
        for_server = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        saved = {name: os.environ.get(name) for name in for_server}
        os.environ.update(for_server)
        try:
            forkserver.ensure_running()
        finally:
            for name, value in saved.items():
                if value is None:
                    del os.environ[name]
                else:
                    os.environ[name] = value
        return forkserver._forkserver._forkserver_pid  # the stdlib exposes no public accessor


# ----------------------------------------------------------------------------- inside a rank

def _rank_main(payload: bytes, rank: int, world_size: int, env: dict, log: str, answer) -> None:
    """A rank: its own process group, its log as stdout and stderr, its environment; run `fn`, send the outcome."""
    if os.name == "posix":
        os.setsid()
    sentinel = multiprocessing.parent_process().sentinel  # ready once the launcher's end is closed: it is gone
    threading.Thread(target=lambda: (wait([sentinel]), os._exit(3)), daemon=True).start()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    os.environ.clear()
    os.environ.update(env)
    try:
        fn, args, kwargs = pickle.loads(payload)
        result = fn(rank, world_size, *args, **kwargs)
        try:
            outcome: tuple[str, Any] = ("ok", _dumps(result))
        except Exception as err:  # noqa: BLE001
            raise TypeError(f"the return value of rank {rank} ({type(result).__name__}) cannot be sent back "
                            f"to the launcher: {err}") from None
    except BaseException as err:  # noqa: BLE001  (report everything, SystemExit included)
        outcome = ("error", {"type": type(err).__name__, "message": str(err), "traceback": traceback.format_exc(),
                             "time": time.time()})
    _cleanup_distributed()
    answer.send(outcome)
    sys.stdout.flush()
    sys.stderr.flush()


def _cleanup_distributed() -> None:
    """Leave the process group if the worker forgot to (NCCL complains otherwise)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
    except Exception:  # noqa: BLE001
        pass


# ----------------------------------------------------------------------------- in the launcher

def _kill(procs: list) -> None:
    """Kill every worker and everything it started (its process group), then reap them."""
    for proc in procs:
        try:
            if os.name == "posix":
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except (ProcessLookupError, PermissionError):  # a rank forked a moment ago may not lead its group yet
            if proc.exitcode is None:
                proc.kill()
    for proc in procs:
        proc.join(10)


def _collect(procs: list, answers: list, deadline: float) -> dict[int, tuple]:
    """Outcomes by rank (("died", None) for a rank gone without one) until all answered, one failed or time is up."""
    outcomes: dict[int, tuple] = {}
    while len(outcomes) < len(procs) and all(o[0] == "ok" for o in outcomes.values()):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        running = [r for r in range(len(procs)) if r not in outcomes]
        waiting = {answers[r]: r for r in running} | {procs[r].sentinel: r for r in running}
        for ready in wait(list(waiting), remaining):
            rank = waiting[ready]
            if rank not in outcomes:
                outcomes[rank] = _receive(answers[rank])
    return outcomes


def _receive(answer) -> tuple:
    """The rank's outcome, if it sent one before it ended."""
    try:
        return answer.recv() if answer.poll() else ("died", None)
    except (EOFError, OSError):
        return ("died", None)


def _run_once(payload: bytes, name: str, world_size: int, timeout: float, env: dict | None, echo: bool) -> list:
    ctx = multiprocessing.get_context("forkserver" if _fork_server() is not None else "spawn")
    base_env = {**os.environ, **(env or {}), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                "WORLD_SIZE": str(world_size), "PYTHONUNBUFFERED": "1"}
    if sys.platform.startswith("linux") and Path("/sys/class/net/lo").exists():
        base_env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only: no hostname lookups
    elif sys.platform == "darwin":
        base_env.setdefault("GLOO_SOCKET_IFNAME", "lo0")
    with tempfile.TemporaryDirectory(prefix="dlkit-launch-") as tmp:
        logs = [Path(tmp, f"log-{rank}.txt") for rank in range(world_size)]
        procs, answers = [], []
        try:
            for rank in range(world_size):
                answer, sender = ctx.Pipe(duplex=False)
                answers.append(answer)
                proc = ctx.Process(target=_rank_main, name=f"rank-{rank}", args=(
                    payload, rank, world_size, {**base_env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                    str(logs[rank]), sender))
                proc.start()
                procs.append(proc)
                sender.close()  # the rank holds the only writing end: reading it tells when it is gone
            outcomes = _collect(procs, answers, time.monotonic() + timeout)
            if all(o[0] == "ok" for o in outcomes.values()) and len(outcomes) < world_size:
                running = [r for r in range(world_size) if r not in outcomes]
                _kill(procs)
                raise LaunchTimeout(
                    f"launch({name}): rank(s) {running} still running after {timeout:g} s and were killed (a rank "
                    f"waiting for a collective that another rank never calls hangs forever).{_logs_text(logs)}",
                    running)
            if any(o[0] != "ok" for o in outcomes.values()):
                time.sleep(0.2)  # let the other ranks' errors land, to name the first one
                for rank in range(world_size):
                    if rank not in outcomes and answers[rank].poll():
                        outcomes[rank] = _receive(answers[rank])
                _kill(procs)
                raise _failure(outcomes, procs, logs)
            if echo:
                for rank, log in enumerate(logs):
                    for line in log.read_text(errors="replace").splitlines():
                        print(f"[rank {rank}] {line}")
            return [pickle.loads(outcomes[rank][1]) for rank in range(world_size)]
        finally:
            _kill(procs)
            for answer in answers:
                answer.close()


def _logs_text(logs: list[Path]) -> str:
    parts = []
    for rank, log in enumerate(logs):
        lines = log.read_text(errors="replace").rstrip().splitlines() if log.exists() else []
        if lines:
            parts.append(f"\n--- output of rank {rank} (last lines) ---\n" + "\n".join(lines[-30:]))
    return "".join(parts)


def _failure(outcomes: dict[int, tuple], procs: list, logs: list[Path]) -> WorkerError:
    """The most useful error: the rank whose exception came first, else the first rank that died."""
    world_size = len(procs)
    errors = sorted((info["time"], rank, info) for rank, (status, info) in outcomes.items() if status == "error")
    if errors:
        _, rank, info = errors[0]
        others = sorted(r for _, r, _ in errors[1:])
        also = f" (rank(s) {others} failed after it)" if others else ""
        message = f": {info['message']}" if info["message"] else ""
        return WorkerError(f"rank {rank} of {world_size} raised {info['type']}{message}{also}\n\n"
                           f"--- traceback of rank {rank} ---\n{info['traceback'].rstrip()}",
                           rank, info["traceback"], info["type"])
    rank = min(r for r, (status, _) in outcomes.items() if status == "died")
    code = procs[rank].exitcode
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
    return WorkerError(f"rank {rank} of {world_size} {how} without a result.{_logs_text(logs)}", rank)


def launch(fn: Callable, world_size: int = 2, args: Sequence = (), kwargs: dict | None = None, *,
           timeout: float = 120.0, env: dict | None = None, echo: bool = True, retries: int = 2) -> list:
    """Run `fn(rank, world_size, *args, **kwargs)` in `world_size` new processes; return the results by rank.

    `fn` may be defined in a notebook cell. `fn`, `args`, `kwargs` and the return values travel by
    cloudpickle (tensors included). `env` adds environment variables. The workers' printed output is
    shown afterwards, each line prefixed with its rank (`echo=False` hides it). Raises `WorkerError`
    if a rank fails and `LaunchTimeout` after `timeout` seconds; either way no worker is left running.
    A start that failed because another program took the chosen port, or in which a worker died by
    a signal inside native code (gloo occasionally aborts with "terminate called without an active
    exception" on a heavily loaded machine), is retried `retries` times on a fresh port. A Python
    exception in `fn` is never retried.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    try:
        payload = _dumps((fn, tuple(args), dict(kwargs or {})))
    except Exception as err:  # noqa: BLE001  (a lock, an open file, a generator... in fn's globals or the args)
        raise TypeError(f"launch sends fn, args and kwargs to the workers with cloudpickle, and they cannot be "
                        f"pickled: {type(err).__name__}: {err}") from None
    name = getattr(fn, "__qualname__", repr(fn))
    for attempt in range(retries + 1):
        try:
            return _run_once(payload, name, world_size, timeout, env, echo)
        except WorkerError as err:
            if attempt < retries and any(s in str(err) for s in _PORT_IN_USE + _NATIVE_CRASH):
                continue
            raise
    raise AssertionError("unreachable")  # pragma: no cover
