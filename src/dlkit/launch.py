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

Why a fork server: a fresh Python pays `import torch` (about 2 s) before its first line, on every
rank of every launch. On POSIX the first `launch` starts one helper process that imports what the
function uses (torch and torch.distributed included) and nothing else, runs no tensor operation,
hence has no thread pools, and forks every later rank from it: a rank starts in milliseconds and
still shares nothing with the launching process or with other launches.

Failures are loud and leave nothing behind: when a worker raises, the others are killed and
`WorkerError` names the rank and shows its traceback; past `timeout` seconds every worker is killed
and `LaunchTimeout` names the ranks still running. Each worker runs in its own process group, so
anything it started dies with it, and a worker exits by itself if the launching process goes away.
"""

from __future__ import annotations

import ast
import inspect
import json
import linecache
import os
import pickle
import select
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
    parent = os.getppid()  # the launcher, or the fork server, which exits when the launcher does
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
                if proc.poll() is None:  # a rank forked a moment ago may not lead its group yet
                    proc.kill()
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
                        PYTHONUNBUFFERED="1")
        if sys.platform.startswith("linux") and Path("/sys/class/net/lo").exists():
            base_env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback only: no hostname lookups
        elif sys.platform == "darwin":
            base_env.setdefault("GLOO_SOCKET_IFNAME", "lo0")
        procs: list = []
        try:
            _start_ranks(procs, world_size, payload, base_env, _preload(fn_spec))
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


# ----------------------------------------------------------------------------- starting the ranks

def _start_ranks(procs: list, world_size: int, payload: Path, base_env: dict, preload: list[str]) -> None:
    """Start every rank, appending each to `procs` as it starts (so a failure half-way kills the started ones).

    Ranks fork from the fork server where there is one; a fresh interpreter each otherwise (Windows,
    or a server that could not start)."""
    server = _fork_server() if os.name == "posix" else None
    for rank in range(world_size):
        env = {**base_env, "RANK": str(rank), "LOCAL_RANK": str(rank)}
        log = payload.parent / f"log-{rank}.txt"
        if server is not None:
            try:
                procs.append(server.start({"payload": str(payload), "rank": rank, "env": env, "log": str(log),
                                           "preload": preload}))
                continue
            except OSError:
                server.stop()
                server = None
        with open(log, "wb") as out:
            procs.append(subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, str(payload), str(rank), _PACKAGE_ROOT], env=env,
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=(os.name == "posix")))


def _preload(fn_spec: dict) -> list[str]:
    """Modules the fork server imports before forking ranks: those `fn` uses, and torch's distributed parts.

    Not torch._dynamo, although DistributedDataParallel's constructor imports it (about 1 s per rank):
    with torch 2.13, ranks that had it imported before their process group existed hung in 15 of 64
    small DDP launches (none of 76 without it). The rank's main thread, holding the GIL,
    destroys the gloo group and joins its worker thread, which is waiting for the GIL to free the
    Python context autograd stashed in the last all-reduce's thread-local state.
    """
    names = [fn_spec["module"]] if fn_spec["kind"] == "ref" else list(fn_spec["modules"].values())
    if any(name == "torch" or name.startswith("torch.") for name in names):
        names += ["torch.distributed", "torch.nn.parallel", "torch.utils.data"]
    return [name for name in dict.fromkeys(names) if name in sys.modules]


_SERVER_BOOTSTRAP = ("import sys; sys.path.insert(0, sys.argv[1]); "
                     "from dlkit.launch import _serve_forks; _serve_forks()")
_SERVER_ANSWER_SECONDS = 120.0  # an import in the server (torch: a few seconds) must not take longer
_server: _ForkServer | None = None


def _fork_server() -> _ForkServer | None:
    """This process's fork server, started on first use (and again if it died); None if it cannot start."""
    global _server
    if _server is None or not _server.alive():
        try:
            _server = _ForkServer()
        except OSError:
            _server = None
    return _server


class _ForkServer:
    """The launcher's end of the fork server: asks it for ranks, learns their exit codes from it."""

    def __init__(self) -> None:
        # A session of its own: a Jupyter kernel shutting down signals the children in its process group
        # and waits for them to go; the server instead exits by itself when the kernel's end of stdin closes.
        # Ranks are forked from it: it must never initialise CUDA, so torch asks NVML, not the CUDA
        # runtime, whether a GPU is there (a rank forked after cudaGetDeviceCount cannot use CUDA).
        self.proc = subprocess.Popen([sys.executable, "-c", _SERVER_BOOTSTRAP, _PACKAGE_ROOT],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     start_new_session=True, env={**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"})
        self.exit_codes: dict[int, int] = {}
        self.started: list[int] = []
        self.answered = threading.Condition()
        self.gone = False
        threading.Thread(target=self._read_answers, daemon=True).start()
        self._send({"sys_path": sys.path})

    def alive(self) -> bool:
        return not self.gone and self.proc.poll() is None

    def start(self, request: dict) -> _ForkedRank:
        """Fork one rank; OSError if the server does not answer in time."""
        with self.answered:
            before = len(self.started)
            self._send(request)
            if not self.answered.wait_for(lambda: len(self.started) > before or self.gone, _SERVER_ANSWER_SECONDS) \
                    or self.gone:
                raise OSError("the fork server did not start a rank")
            return _ForkedRank(self, self.started[before])

    def exit_code(self, pid: int) -> int | None:
        """The rank's exit code once it ended (-9 if the server died first), else None."""
        with self.answered:
            if pid in self.exit_codes:
                return self.exit_codes[pid]
            return -signal.SIGKILL if self.gone else None

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()

    def _send(self, message: dict) -> None:
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as err:
            raise OSError(f"the fork server is gone: {err}") from None

    def _read_answers(self) -> None:
        for line in self.proc.stdout:
            answer = json.loads(line)
            with self.answered:
                if "started" in answer:
                    self.started.append(answer["started"])
                else:
                    self.exit_codes[answer["exited"]] = answer["code"]
                self.answered.notify_all()
        self.proc.wait()  # reap it: a zombie child would look alive to whoever lists this process's children
        with self.answered:
            self.gone = True
            self.answered.notify_all()


class _ForkedRank:
    """A rank forked by the server, with the part of subprocess.Popen's interface that launch uses."""

    def __init__(self, server: _ForkServer, pid: int):
        self.server, self.pid = server, pid

    @property
    def returncode(self) -> int | None:
        return self.server.exit_code(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"rank process {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode


def _serve_forks() -> None:
    """The fork server's loop (a process of its own): fork a rank per request, report every rank's exit.

    Requests are JSON lines on stdin: first {"sys_path"}, then one {"payload", "rank", "env", "log",
    "preload"} per rank; answers go to stdout as {"started": pid} and {"exited": pid, "code": code}.
    Modules named in "preload" are imported here, once, before the fork. The server exits, killing
    its ranks, when stdin closes: the launcher is gone."""
    lines = _lines(sys.stdin.fileno())
    sys.path[:0] = [p for p in json.loads(next(lines))["sys_path"] if p not in sys.path]
    children: set[int] = set()

    def say(**answer) -> None:
        os.write(1, json.dumps(answer).encode() + b"\n")

    for request in lines:
        if request is not None:
            request = json.loads(request)
            for name in request["preload"]:
                try:
                    __import__(name)
                except Exception:  # noqa: BLE001  (the rank imports it again and reports the error)
                    pass
            pid = os.fork()
            if pid == 0:
                _forked_rank(request)
            children.add(pid)
            say(started=pid)
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                children.discard(pid)
                say(exited=pid, code=os.waitstatus_to_exitcode(status))
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def _lines(fd: int):
    """Lines read from `fd` as they come, and None every 50 ms while none comes; stops at end of file."""
    buffer = b""
    while True:
        if b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line
            continue
        if not select.select([fd], [], [], 0.05)[0]:
            yield None
            continue
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return
        buffer += chunk


def _forked_rank(request: dict) -> None:
    """In a freshly forked rank: its own session, its log as stdout and stderr, its environment; then run."""
    code = 1
    try:
        os.setsid()
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(devnull)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        os.environ.clear()
        os.environ.update(request["env"])
        _worker_main(request["payload"], request["rank"])
        code = 0
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        os._exit(code)


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
