"""Run one function in several processes, as `torchrun` would, from a script or a Jupyter cell.

    results = dlkit.launch(worker, world_size=2, args=(x, y), timeout=60)

starts `world_size` fresh Python processes; process `rank` calls `worker(rank, world_size, *args,
**kwargs)` and `launch` returns the return values, one per rank, in rank order. Each process finds
the environment `torch.distributed.init_process_group` reads by default (MASTER_ADDR=127.0.0.1,
MASTER_PORT=a free port, RANK, WORLD_SIZE, LOCAL_RANK), so a worker written for `torchrun` runs
unchanged.

Why not `multiprocessing`: the spawn start method pickles a function by reference (module and
name), and a function defined in a notebook cell lives in `__main__`, which a spawned process
cannot import; fork copies a process that may already run torch's thread pools and can hang.
`launch` instead sends functions of `__main__` (and the notebook functions, classes and values they
use) as source code and re-executes them in the new process; functions of importable modules go
by reference.

Failures are loud and leave nothing behind: when a worker raises, the others are killed and
`WorkerError` names the rank and shows its traceback; past `timeout` seconds every worker is killed
and `LaunchTimeout` names the ranks still running. Each worker runs in its own process group, so
anything it started dies with it, and a worker exits by itself if the launching process goes away.
"""

from __future__ import annotations

import ast
import inspect
import linecache
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Sequence

__all__ = ["launch", "free_port", "WorkerError", "LaunchTimeout"]

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)
_BOOTSTRAP = ("import sys; sys.path.insert(0, sys.argv[3]); "
              "from dlkit.launch import _worker_main; _worker_main(sys.argv[1], int(sys.argv[2]))")
_PORT_IN_USE = ("EADDRINUSE", "Address already in use", "address already in use")
# Signs that a worker died in native code rather than raising in `fn`: worth one more try.
_NATIVE_CRASH = ("killed by signal", "terminate called")


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


# ----------------------------------------------------------------------------- sending functions

def _importable(obj) -> bool:
    """True when `obj` can be pickled by reference and imported again in a fresh process."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if not module or module in ("__main__", "__mp_main__") or "<locals>" in qualname or "<lambda>" in qualname:
        return False
    mod = sys.modules.get(module)
    return mod is not None and getattr(mod, "__file__", None) is not None


def _class_source(cls) -> str:
    """Source of a class defined in __main__ (inspect.getsource fails there before Python 3.13)."""
    try:
        return inspect.getsource(cls)
    except (OSError, TypeError):
        pass
    for member in vars(cls).values():
        func = getattr(member, "__func__", member)
        func = getattr(func, "fget", func)
        code = getattr(func, "__code__", None)
        if code is None:
            continue
        lines = linecache.getlines(code.co_filename)
        if not lines:
            continue
        for node in ast.walk(ast.parse("".join(lines))):
            if isinstance(node, ast.ClassDef) and node.name == cls.__name__ \
                    and node.lineno <= code.co_firstlineno <= node.end_lineno:
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                return "".join(lines[start - 1:node.end_lineno])
    raise OSError(f"could not find the source code of class {cls.__qualname__}")


def _source_of(obj) -> str:
    if inspect.isclass(obj):
        source = _class_source(obj)
    else:
        source = inspect.getsource(obj)
    return textwrap.dedent(source)


def _code_globals(code) -> list[str]:
    """Global names a code object (and the functions, lambdas and comprehensions inside it) reads."""
    names = list(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names.extend(_code_globals(const))
    return names


def _names_used(obj, source: str) -> list[str]:
    """The names `obj` needs from its module: for a function, the globals its code reads plus what its
    decorators, defaults and annotations use when the `def` runs again; for a class, every name its source reads."""
    tree = ast.parse(source)
    names: list[str] = []
    if inspect.isfunction(obj):
        names.extend(_code_globals(obj.__code__))
        node = tree.body[0]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            outside_body = [*node.decorator_list, node.args, *([node.returns] if node.returns else [])]
            names.extend(n.id for part in outside_body for n in ast.walk(part) if isinstance(n, ast.Name))
    else:
        names.extend(n.id for n in ast.walk(tree) if isinstance(n, ast.Name))
    return list(dict.fromkeys(names))


def _spec(fn: Callable) -> dict:
    """What a fresh process needs to rebuild `fn`: a reference, or sources plus the globals they use."""
    if _importable(fn):
        return {"kind": "ref", "module": fn.__module__, "qualname": fn.__qualname__}
    if not inspect.isfunction(fn):
        raise TypeError(f"launch needs a plain function defined with `def`, got {type(fn).__name__} {fn!r}")
    if fn.__name__ == "<lambda>" or "<locals>" in fn.__qualname__ or fn.__closure__:
        raise TypeError(f"launch needs a function defined at the top level of a cell or module; "
                        f"{fn.__qualname__} is a lambda or a nested function, which cannot be sent to other processes")
    spec = {"kind": "source", "name": fn.__name__, "sources": [], "modules": {}, "values": {}, "skipped": {}}
    done: set[str] = set()

    def add(obj, name: str) -> None:
        try:
            source = _source_of(obj)
        except (OSError, TypeError) as err:
            raise TypeError(f"launch could not read the source code of {name} ({err}); define it in a cell "
                            "of its own or in a module") from None
        namespace = obj.__globals__ if inspect.isfunction(obj) else vars(sys.modules.get(obj.__module__, sys))
        for used in _names_used(obj, source):
            if used in done or used not in namespace:
                continue
            done.add(used)
            value = namespace[used]
            if inspect.ismodule(value):
                spec["modules"][used] = value.__name__
            elif (inspect.isfunction(value) or inspect.isclass(value)) and not _importable(value):
                add(value, used)
            else:
                try:
                    spec["values"][used] = pickle.dumps(value)
                except Exception as err:  # noqa: BLE001  (a lock, an open file, a generator...)
                    spec["skipped"][used] = f"{type(value).__name__}: {type(err).__name__}: {err}"
        spec["sources"].append((name, source))

    done.add(fn.__name__)
    add(fn, fn.__name__)
    return spec


def _rebuild(spec: dict) -> Callable:
    """Inverse of _spec, run in the worker."""
    import importlib

    if spec["kind"] == "ref":
        obj = importlib.import_module(spec["module"])
        for part in spec["qualname"].split("."):
            obj = getattr(obj, part)
        return obj
    namespace = sys.modules["__main__"].__dict__
    for name, module in spec["modules"].items():
        namespace[name] = importlib.import_module(module)
    for name, blob in spec["values"].items():
        namespace[name] = pickle.loads(blob)
    for name, source in spec["sources"]:
        filename = f"<launched cell: {name}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (our own user's code)
    return namespace[spec["name"]]


# ----------------------------------------------------------------------------- inside a worker

def _watch_parent(parent: int) -> None:
    """Exit when the launching process is gone, so no worker outlives it."""
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(0.5)


def _worker_main(payload_path: str, rank: int) -> None:
    parent = int(os.environ.get("DLKIT_LAUNCH_PARENT", os.getppid()))
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    out_dir = Path(payload_path).parent
    world_size = int(os.environ["WORLD_SIZE"])

    def report(status: str, body: Any) -> None:
        tmp = out_dir / f"result-{rank}.tmp"
        tmp.write_bytes(pickle.dumps((status, body)))
        tmp.replace(out_dir / f"result-{rank}.pkl")

    try:
        payload = pickle.loads(Path(payload_path).read_bytes())
        for entry in reversed(payload["sys_path"]):
            if entry not in sys.path:
                sys.path.insert(1, entry)
        os.chdir(payload["cwd"])
        fn = _rebuild(payload["fn"])
        args, kwargs = pickle.loads(payload["args"])
        result = fn(rank, world_size, *args, **kwargs)
        try:
            blob = pickle.dumps(result)
        except Exception as err:  # noqa: BLE001
            raise TypeError(f"the return value of rank {rank} ({type(result).__name__}) cannot be sent back "
                            f"to the launcher: {err}") from None
    except BaseException as err:  # noqa: BLE001  (report everything, SystemExit included)
        skipped = payload.get("fn", {}).get("skipped", {}) if "payload" in locals() else {}
        hint = ""
        if isinstance(err, NameError) and getattr(err, "name", None) in skipped:
            hint = f"\n(launch could not send the global {err.name!r} to the workers: {skipped[err.name]})"
        report("error", {"type": type(err).__name__, "message": str(err) + hint,
                         "traceback": traceback.format_exc() + hint, "time": time.time()})
        _cleanup_distributed()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    _cleanup_distributed()
    tmp = out_dir / f"result-{rank}.tmp"
    tmp.write_bytes(b"ok" + blob)
    tmp.replace(out_dir / f"result-{rank}.pkl")
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

def _kill(procs: list[subprocess.Popen]) -> None:
    """Kill every worker and everything it started, then reap them."""
    for proc in procs:
        if proc.poll() is None or os.name == "posix":
            try:
                if os.name == "posix":
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
            except (ProcessLookupError, PermissionError):
                pass
    for proc in procs:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover  (SIGKILL does not wait)
            pass


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _read_result(out_dir: Path, rank: int):
    path = out_dir / f"result-{rank}.pkl"
    if not path.exists():
        return None
    raw = path.read_bytes()
    if raw.startswith(b"ok"):
        return "ok", raw[2:]
    return pickle.loads(raw)


def _run_once(fn_spec: dict, world_size: int, args_blob: bytes, timeout: float, env: dict | None,
              echo: bool) -> list:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="dlkit-launch-") as tmp:
        out_dir = Path(tmp)
        payload = out_dir / "payload.pkl"
        payload.write_bytes(pickle.dumps({"fn": fn_spec, "args": args_blob, "sys_path": list(sys.path),
                                          "cwd": os.getcwd()}))
        base_env = {**os.environ, **(env or {})}
        base_env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(world_size),
                        DLKIT_LAUNCH_PARENT=str(os.getpid()), PYTHONUNBUFFERED="1")
        if sys.platform.startswith("linux") and Path("/sys/class/net/lo").exists():
            base_env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only: no hostname lookups
        elif sys.platform == "darwin":
            base_env.setdefault("GLOO_SOCKET_IFNAME", "lo0")
        procs, logs = [], []
        try:
            for rank in range(world_size):
                log = open(out_dir / f"log-{rank}.txt", "wb")
                logs.append(log)
                procs.append(subprocess.Popen(
                    [sys.executable, "-c", _BOOTSTRAP, str(payload), str(rank), _PACKAGE_ROOT],
                    env={**base_env, "RANK": str(rank), "LOCAL_RANK": str(rank)},
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=(os.name == "posix")))
            deadline = time.monotonic() + timeout
            while True:
                codes = [p.poll() for p in procs]
                if any(c not in (None, 0) for c in codes) or all(c == 0 for c in codes):
                    break
                if time.monotonic() > deadline:
                    running = [r for r, c in enumerate(codes) if c is None]
                    _kill(procs)
                    text = _logs_text(out_dir, world_size)
                    raise LaunchTimeout(
                        f"launch({fn_spec.get('name') or fn_spec.get('qualname')}): rank(s) {running} still running "
                        f"after {timeout:g} s and were killed (a rank waiting for a collective that another rank "
                        f"never calls hangs forever).{text}", running)
                time.sleep(0.02)
            if any(c not in (None, 0) for c in codes):
                time.sleep(0.2)  # let the other ranks' errors land, to name the first one
                _kill(procs)
                raise _failure(out_dir, procs, world_size)
            results = []
            for rank in range(world_size):
                status, body = _read_result(out_dir, rank) or ("error", None)
                if status != "ok":
                    raise _failure(out_dir, procs, world_size)
                results.append(pickle.loads(body))
            if echo:
                _echo(out_dir, world_size)
            return results
        finally:
            _kill(procs)
            for log in logs:
                log.close()


def _logs_text(out_dir: Path, world_size: int) -> str:
    parts = []
    for rank in range(world_size):
        path = out_dir / f"log-{rank}.txt"
        text = path.read_text(errors="replace") if path.exists() else ""
        if text.strip():
            parts.append(f"\n--- output of rank {rank} (last lines) ---\n{_tail(text)}")
    return "".join(parts)


def _echo(out_dir: Path, world_size: int) -> None:
    for rank in range(world_size):
        path = out_dir / f"log-{rank}.txt"
        text = path.read_text(errors="replace") if path.exists() else ""
        for line in text.splitlines():
            print(f"[rank {rank}] {line}")


def _failure(out_dir: Path, procs: list[subprocess.Popen], world_size: int) -> Exception:
    """The most useful error: the rank whose exception came first, else the first rank that died."""
    errors = []
    for rank in range(world_size):
        got = _read_result(out_dir, rank)
        if got and got[0] == "error":
            errors.append((got[1]["time"], rank, got[1]))
    if errors:
        _, rank, info = min(errors)
        others = sorted(r for _, r, _ in errors if r != rank)
        also = f" (rank(s) {others} failed after it)" if others else ""
        message = f": {info['message']}" if info["message"] else ""
        return WorkerError(f"rank {rank} of {world_size} raised {info['type']}{message}{also}\n\n"
                           f"--- traceback of rank {rank} ---\n{info['traceback'].rstrip()}",
                           rank, info["traceback"], info["type"])
    dead = [(r, p.returncode) for r, p in enumerate(procs) if p.returncode not in (None, 0)]
    rank, code = dead[0] if dead else (0, None)
    how = f"was killed by signal {-code}" if code is not None and code < 0 else f"exited with code {code}"
    return WorkerError(f"rank {rank} of {world_size} {how} without a result.{_logs_text(out_dir, world_size)}", rank)


def launch(fn: Callable, world_size: int = 2, args: Sequence = (), kwargs: dict | None = None, *,
           timeout: float = 120.0, env: dict | None = None, echo: bool = True, retries: int = 2) -> list:
    """Run `fn(rank, world_size, *args, **kwargs)` in `world_size` new processes; return the results by rank.

    `fn` may be defined in a notebook cell. `args`, `kwargs` and the return values travel by pickle
    (tensors included). `env` adds environment variables. The workers' printed output is shown
    afterwards, each line prefixed with its rank (`echo=False` hides it). Raises `WorkerError` if a
    rank fails and `LaunchTimeout` after `timeout` seconds; either way no worker is left running.
    A start that failed because another program took the chosen port, or in which a worker died by
    a signal inside native code (gloo occasionally aborts with "terminate called without an active
    exception" on a heavily loaded machine), is retried `retries` times on a fresh port. A Python
    exception in `fn` is never retried.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    spec = _spec(fn)
    try:
        args_blob = pickle.dumps((tuple(args), dict(kwargs or {})))
    except Exception as err:  # noqa: BLE001
        raise TypeError(f"launch sends args and kwargs to the workers by pickle, and they cannot be pickled: {err}") from None
    for attempt in range(retries + 1):
        try:
            return _run_once(spec, world_size, args_blob, timeout, env, echo)
        except WorkerError as err:
            if attempt < retries and any(s in str(err) for s in _PORT_IN_USE + _NATIVE_CRASH):
                continue
            raise
    raise AssertionError("unreachable")  # pragma: no cover
