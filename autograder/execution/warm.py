"""Warm kernels: pay `import torch, tensorflow` once per grading run, not once per submission.

A fresh Jupyter kernel spends seconds importing the libraries a notebook uses before any
student code runs. A grading run therefore keeps a zygote (zygote.py): a process that has
imported the modules the class's instructor notebooks import and forks a new kernel for every
submission. Every kernel is still a fresh process forked from that clean parent, sandboxed
and limited like a cold one, and nothing one submission does can reach the next.

One zygote serves all the workers of a machine: the run's driver starts it before it forks the
workers (a Dask worker on another machine starts its own), so the imports are paid once, not once
per worker, and the kernels share the zygote's pages. Each kernel has a keeper process, its child
subreaper, which catches whatever the submission detaches and kills it when the kernel is gone; the
worker watches the kernel by pid (ForkedKernel below stands in for subprocess.Popen) and kills the
keeper's whole tree after the submission (kill_kernels).
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import nbformat
import psutil

from autograder.course import first_use_modules, notebook_imports
from autograder.isolation import sandbox
from autograder.isolation.limits import kill_descendants
from autograder.paths import SANDBOX_SCRIPT, ZYGOTE_SCRIPT
from dlkit.devices import xla_backend
from dlkit.integrity import CORE

#: Imported in every zygote: what any kernel loads to start (ipykernel, and what IPython's shell imports
#: as it starts: its debugger, history database and stored-variables extension, ~10 ms a kernel), the
#: kit's helper package, and what the grader's own first cell imports (dlkit.integrity snapshots numpy's,
#: torch's and dlkit's checks).
ALWAYS = ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.debugger", "matplotlib_inline.backend_inline",
          "IPython.core.debugger", "IPython.core.completerlib", "IPython.extensions.storemagic", "sqlite3",
          "tornado.platform.asyncio", "dlkit", "dlkit.integrity", *CORE)


#: The zygote's environment on top of the worker's. Importing torch's compiler stack calls
#: torch.cuda.is_available(), which by default initialises CUDA through cudaGetDeviceCount; a kernel
#: forked after that gets "Cannot re-initialize CUDA in forked subprocess" (seen on an H100: every cuda
#: test failed). Asked through NVML instead, the zygote learns the device count without touching CUDA.
ZYGOTE_ENV = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


class ZygoteError(RuntimeError):
    """The zygote could not start or fork a kernel; the caller falls back to a cold kernel."""


@lru_cache(maxsize=None)
def preload_modules(*notebooks: Path, devices: Iterable[str] = ("cpu",)) -> tuple[str, ...]:
    """ALWAYS, then for each notebook in turn the modules it imports at top level (`import a.b`,
    `from a.b import c`) and those it reaches on first use; each once, in that order.

    Given every source notebook of a run, one zygote serves all its assignments, so the run pays the
    imports once instead of once per assignment (a zygote with torch, TensorFlow, ONNX Runtime and
    the compiler stack measured ~6 s to start, ~1.6 GB of address space, well inside the kernel's
    memory limit). The zygote imports them in this order and forks a kernel as soon as what its own
    notebook needs is in: given in the order the run grades them, the first kernels do not wait for
    what only the last notebooks need. Cached: the released sources do not change during a run.
    """
    found = [*ALWAYS, *xla_first(devices)]
    for notebook in notebooks:
        found += notebook_modules(notebook)
    return tuple(dict.fromkeys(found))


@lru_cache(maxsize=None)
def notebook_modules(notebook: Path) -> tuple[str, ...]:
    """What one notebook imports at top level, then what it reaches on first use (course.py reads both).

    Read without nbformat's schema validation (the instructor sources are checked when released): the run's
    zygote starts only once these are known, and a first validation compiles the schema (~50 ms).
    """
    nb = nbformat.reader.reads(notebook.read_text(encoding="utf-8"))
    imported = notebook_imports(nb)
    return (*imported, *first_use_modules(nb, imported))


def xla_first(devices: Iterable[str]) -> tuple[str, ...]:
    """torch_xla, where the grader visits "xla" (among `devices`): imported before the notebooks'
    modules, since a kernel that has TensorFlow can no longer load it (dlkit.devices.xla_blocked).
    Forking after the import is safe: the PJRT client starts at a kernel's first xla tensor, never in
    the zygote."""
    return ("torch_xla.core.xla_model",) if "xla" in devices and xla_backend() else ()


class ForkedKernel:
    """The subprocess.Popen methods jupyter_client uses, for a kernel forked by a zygote: not this process's
    child, so it is watched through psutil (which notices a pid reused by another process)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int, keeper: int):
        self.pid = pid
        self.returncode: int | None = None
        self._process = self.keeper = None  # psutil handles, taken now: later they tell a reused pid apart
        try:
            self.keeper = psutil.Process(keeper)
            self._process = psutil.Process(pid)
        except psutil.NoSuchProcess:
            self.returncode = -signal.SIGKILL

    def poll(self) -> int | None:
        """None while the kernel runs; once it is gone, -SIGKILL (only its keeper learns the real status)."""
        if self.returncode is None:
            try:
                gone = not self._process.is_running() or self._process.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                gone = True
            if gone:
                self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            try:
                self._process.send_signal(signum)
            except psutil.NoSuchProcess:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """A zygote, reached through its Unix socket at `address`: one this process started (`Zygote.spawn`, which
    does not wait for its imports), or one another process, the run's driver, started (`Zygote(address)`,
    whose first kernel waits for those imports)."""

    def __init__(self, address: str, process: subprocess.Popen | None = None, folder: Path | None = None,
                 modules: tuple[str, ...] = (), env: dict[str, str] | None = None, start_timeout: float = 300):
        self.address, self.process, self.folder = address, process, folder
        self.modules, self.env, self.broken = modules, env or {}, False
        self.start_timeout = start_timeout
        self._ready_by = time.monotonic() + start_timeout
        self.loaded: list[str] | None = None
        self.server: int | None = process.pid if process else None  # the zygote's pid, where known
        self.needs: tuple[str, ...] | None = None  # what the next kernels' notebook imports (None: all)

    @classmethod
    def spawn(cls, modules: tuple[str, ...], env: dict[str, str] | None = None, log: Path | None = None,
              rlimits: dict[str, int] | None = None, start_timeout: float = 300, plan: dict | None = None) -> Zygote:
        """Start a zygote importing `modules`, with the kernels' environment `env` on top of this process's
        (some libraries read it when imported), the resource limits `rlimits` (limits.process_rlimits) and
        its output appended to `log`; all at once, or as `plan` (import_plan) says."""
        folder = Path(tempfile.mkdtemp(prefix="kit-zygote-"))  # 0700: only this user reaches the socket
        address = str(folder / "socket")
        stderr = open(log, "ab") if log else None
        try:
            process = subprocess.Popen(
                [sys.executable, str(ZYGOTE_SCRIPT), str(SANDBOX_SCRIPT), address, json.dumps(rlimits or {}),
                 json.dumps(plan or {}), *modules],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd="/",
                # Only what a kernel may see (sandbox.kernel_env): a forked kernel's /proc/self/environ is the
                # zygote's, whatever the kernel sets afterwards. On top, the kernels' own: imports read some.
                env={**sandbox.kernel_env(dict(os.environ)), **(env or {}), **ZYGOTE_ENV})
        finally:
            if stderr:
                stderr.close()
        return cls(address, process, folder, modules, env, start_timeout)

    def ready(self) -> list[str]:
        """Wait (until the start timeout) for a zygote this process started to finish its imports; the
        modules it loaded."""
        if self.loaded is None and self.process is not None:
            ready, _, _ = select.select([self.process.stdout], [], [], max(0.0, self._ready_by - time.monotonic()))
            line = self.process.stdout.readline() if ready else ""
            if not line:
                self.close()
                raise ZygoteError("the zygote did not answer" if ready else
                                  f"the zygote did not start in {self.start_timeout:g} s")
            self.loaded = json.loads(line).get("ready", [])
        return self.loaded or []

    def fork_kernel(self, connection_file: str, env: dict[str, str], cwd: str | None, sandbox_spec: str | None,
                    timeout: float = 60) -> ForkedKernel:
        """A new kernel, forked from the zygote, serving `connection_file`, limited as this process is; its
        stray output goes to this process's stderr (a worker's log)."""
        first = self.loaded is None
        try:
            self.wait_listening()
            request = {"connection_file": connection_file, "env": env, "cwd": cwd, "sandbox_spec": sandbox_spec,
                       "modules": None if self.needs is None else list(self.needs)}
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                # A zygote still importing answers once what the kernel needs is in: the first answer may take
                # its start.
                conn.settimeout(max(timeout, self._ready_by - time.monotonic()) if first else timeout)
                conn.connect(self.address)
                socket.send_fds(conn, [(json.dumps(request) + "\n").encode()], [sys.stderr.fileno()])
                reply = json.loads(conn.makefile("rb").readline() or b"{}")
        except (OSError, ValueError) as err:
            reply = {"error": f"the zygote did not answer: {err}"}
        if "pid" not in reply:
            # Cold kernels from now on: asking again would cost every later submission the same wait. Said in the
            # worker's log: nbgrader's, where the provisioner notes the cold start, is kept only on failure.
            self.broken = True
            why = reply.get("error", "the zygote gave no kernel")
            print(f"WARNING: cold kernels from now on in this worker: {why}", file=sys.stderr)
            raise ZygoteError(why)
        if first:
            self.loaded, self.server = reply.get("loaded", []), reply.get("zygote")
            print(f"warm kernels: a zygote preloaded {' '.join(self.loaded)}", file=sys.stderr)  # the worker's log
        kernel = ForkedKernel(reply["pid"], reply["keeper"])
        _forked.append(kernel)
        return kernel

    def wait_listening(self) -> None:
        """Wait for the socket of a zygote this process started: it appears once the zygote listens, a few
        hundredths of a second after the start. (A process that reaches a zygote by address alone, a worker,
        cannot tell a zygote still starting from a dead one: the driver waits for the socket before it
        starts the workers, and a worker that finds none starts cold kernels.) OSError if it never comes."""
        while self.process is not None and not os.path.exists(self.address):
            if self.process.poll() is not None:
                raise OSError(f"the zygote exited with status {self.process.returncode}")
            if time.monotonic() > self._ready_by:
                raise OSError(f"the zygote did not start in {self.start_timeout:g} s")
            time.sleep(0.01)

    def alive(self) -> bool:
        return not self.broken and (self.process is None or self.process.poll() is None)

    def close(self) -> None:
        """Stop a zygote this process started (its kernels' keepers are re-parented, and killed with the run)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


def import_plan(notebooks: Sequence[Path], ahead: int, devices: Iterable[str] = ("cpu",)) -> dict:
    """When a run's zygote needs what, for a run that grades submissions of `notebooks` in this order (one
    entry per submission) with `ahead` workers: {"ahead": ahead, "at": {i: the modules the i-th submission
    is the first to need}} (zygote.py). The zygote then imports only what the next `ahead` kernels need:
    importing further ahead (TensorFlow for the fourth kernel while the third is asked for) kept a worker
    waiting ~1 s for a kernel whose modules were in (measured)."""
    at: dict[str, list[str]] = {}
    seen: set[str] = set()
    for i, notebook in enumerate(notebooks):
        new = [m for m in preload_modules(notebook, devices=tuple(devices)) if m not in seen]
        if new:
            at[str(i)] = new
            seen.update(new)
    return {"ahead": ahead, "at": at}


def start(modules: tuple[str, ...], env: dict[str, str], log: Path | None, rlimits: dict[str, int],
          plan: dict | None = None) -> Zygote | None:
    """A new zygote (see Zygote), or None, said on stderr, where this system cannot start one: cold kernels."""
    try:
        return Zygote.spawn(modules, env=env, log=log, rlimits=rlimits, plan=plan)
    except OSError as err:
        print(f"WARNING: cold kernels: the zygote could not start: {err}", file=sys.stderr)
        return None


_active: Zygote | None = None
_suspended = False
_forked: list[ForkedKernel] = []


def activate(modules: tuple[str, ...], address: str | None = None, rlimits: dict[str, int] | None = None,
             needs: tuple[str, ...] | None = None) -> None:
    """Make the zygote kernels of this process fork from: the run's zygote at `address`, or else one of this
    process's own for `modules` under `rlimits`, started if needed (not waited for). The next kernels are
    forked as soon as the zygote has imported `needs`, what their notebook imports (None: everything)."""
    global _active
    if _active is None or not ((_active.address == address) if address else
                               (_active.process is not None and _active.modules == modules)):
        # (the same zygote is kept even broken: then kernels start cold, since starting it again could fail the
        # same way)
        deactivate()
        _active = Zygote(address) if address else start(modules, env=dict(os.environ), log=None,
                                                          rlimits=rlimits or {})
    if _active is not None:
        _active.needs = needs


@contextmanager
def suspended() -> Iterator[None]:
    """Within the block, kernels of this process start cold even though a zygote is active (a retry)."""
    global _suspended
    _suspended = True
    try:
        yield
    finally:
        _suspended = False


def deactivate() -> None:
    """Stop using the zygote (and stop it, if this process started it): kernels start cold again."""
    global _active
    if _active is not None:
        _active.close()
        _active = None


def active() -> Zygote | None:
    """The zygote kernels of this process fork from, or None for cold kernels."""
    return _active if _active is not None and _active.alive() and not _suspended else None


def kill_kernels() -> None:
    """Kill every kernel this process had forked, with everything its keeper holds, and the keeper."""
    while _forked:
        keeper = _forked.pop().keeper
        if keeper is None:
            continue
        try:
            kill_descendants(root=keeper)
            keeper.kill()
        except psutil.NoSuchProcess:  # gone (its pid perhaps reused): nothing of the kernel's is left below it
            pass


def spared() -> set[int]:
    """Processes clean-up must not kill: the zygote (a descendant of this process where it started it)."""
    return {_active.server} if _active is not None and _active.server else set()
