"""Warm kernels: pay `import torch, tensorflow` once per grading worker, not once per submission.

A fresh Jupyter kernel spends seconds importing the libraries a notebook uses before any
student code runs. Each grading worker therefore keeps a zygote (zygote.py): a process that has
imported the modules the class's instructor notebooks import and forks a new kernel for every
submission. Every kernel is still a fresh process forked from that clean parent, sandboxed
and limited like a cold one, and nothing one submission does can reach the next.

The worker must be a child subreaper (limits.become_subreaper): the forked kernel's parent exits
at once, so the kernel is re-parented to the worker, which then waits for and kills it like a
kernel it started itself (ForkedKernel below stands in for subprocess.Popen).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import nbformat
import psutil

from autograder.course import first_use_modules, notebook_imports
from autograder.isolation.limits import become_subreaper
from autograder.paths import SANDBOX_SCRIPT, ZYGOTE_SCRIPT
from dlkit.devices import xla_backend
from dlkit.integrity import CORE

#: Imported in every zygote: what any kernel loads to start, the kit's helper package, and what the
#: grader's own first cell imports (dlkit.integrity snapshots numpy's, torch's and dlkit's checks).
ALWAYS = ("ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.debugger", "matplotlib_inline.backend_inline",
          "dlkit", "dlkit.integrity", *CORE)


#: The zygote's environment on top of the worker's. Importing torch's compiler stack calls
#: torch.cuda.is_available(), which by default initialises CUDA through cudaGetDeviceCount; a kernel
#: forked after that gets "Cannot re-initialize CUDA in forked subprocess" (seen on an H100: every cuda
#: test failed). Asked through NVML instead, the zygote learns the device count without touching CUDA.
ZYGOTE_ENV = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}


class ZygoteError(RuntimeError):
    """The zygote could not start or fork a kernel; the caller falls back to a cold kernel."""


@lru_cache(maxsize=None)
def preload_modules(*notebooks: Path, devices: Iterable[str] = ("cpu",)) -> tuple[str, ...]:
    """The modules the notebooks import at top level (`import a.b`, `from a.b import c`), plus ALWAYS.

    Given every source notebook of a class, one zygote per worker serves all its assignments, so a
    worker pays the imports once per run instead of once per assignment (a zygote with torch,
    TensorFlow and ONNX Runtime measured ~5 s to start, ~1.6 GB of address space, well inside
    the kernel's memory limit). Cached: a worker asks for every submission, and the released
    sources do not change during a run.
    """
    sources = [nbformat.read(notebook, as_version=4) for notebook in notebooks]
    found = [name for nb in sources for name in notebook_imports(nb)]
    later = [name for nb in sources for name in first_use_modules(nb)]
    return tuple(dict.fromkeys([*ALWAYS, *xla_first(devices), *found, *later]))


def xla_first(devices: Iterable[str]) -> tuple[str, ...]:
    """torch_xla, where the grader visits "xla" (among `devices`): imported before the notebooks'
    modules, since a kernel that has TensorFlow can no longer load it (dlkit.devices.xla_blocked).
    Forking after the import is safe: the PJRT client starts at a kernel's first xla tensor, never in
    the zygote."""
    return ("torch_xla.core.xla_model",) if "xla" in devices and xla_backend() else ()


class ForkedKernel:
    """The subprocess.Popen methods jupyter_client uses, for a kernel this process adopted rather than started."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # not adopted by us after all: judge by whether it still exists
                if not psutil.pid_exists(self.pid):
                    self.returncode = -signal.SIGKILL
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
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
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """One zygote process and the modules it preloaded.

    Started without waiting: it imports its modules while the worker prepares the submission's
    workspace and nbgrader's autograde gets ready, and the first kernel request waits for it (`ready`).
    """

    def __init__(self, modules: tuple[str, ...], start_timeout: float = 300):
        become_subreaper()
        self.modules = modules
        self.process = subprocess.Popen([sys.executable, str(ZYGOTE_SCRIPT), str(SANDBOX_SCRIPT), *modules],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/",
                                        env={**os.environ, **ZYGOTE_ENV})
        self._ready_by = time.monotonic() + start_timeout
        self.loaded: list[str] | None = None

    def ready(self) -> list[str]:
        """Wait (until the start timeout) for the zygote to finish its imports; the modules it loaded."""
        if self.loaded is None:
            try:
                self.loaded = self._read(max(0.0, self._ready_by - time.monotonic())).get("ready", [])
            except ZygoteError as err:  # the kernel then starts cold (kernel.py); said here, in the worker's log
                print(f"WARNING: cold kernels: the zygote did not start: {err}", file=sys.stderr)
                raise
            print(f"warm kernels: a zygote preloaded {' '.join(self.loaded)}", file=sys.stderr)  # the worker's log
        return self.loaded

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read(self, timeout: float) -> dict:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.close()
            raise ZygoteError("the zygote did not answer" if ready else f"the zygote did not answer in {timeout:g} s")
        return json.loads(line)

    def fork_kernel(self, connection_file: str, env: dict[str, str], cwd: str | None, sandbox_spec: str | None,
                    timeout: float = 60) -> ForkedKernel:
        """A new kernel, forked from the zygote, serving `connection_file`."""
        self.ready()
        request = {"connection_file": connection_file, "env": env, "cwd": cwd, "sandbox_spec": sandbox_spec}
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except OSError as err:
            self.close()
            raise ZygoteError(f"the zygote is gone: {err}") from err
        reply = self._read(timeout)
        if "pid" not in reply or reply["pid"] <= 0:
            raise ZygoteError(reply.get("error", "the zygote gave no kernel"))
        return ForkedKernel(reply["pid"])

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


_active: Zygote | None = None
_suspended = False


def activate(modules: tuple[str, ...]) -> Zygote:
    """Make the zygote for `modules` the one kernels of this process fork from, starting it if needed (not waiting)."""
    global _active
    if _active is not None and (_active.modules != modules or not _active.alive()):
        _active.close()
        _active = None
    if _active is None:
        _active = Zygote(modules)
    return _active


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
    """Stop the zygote (if any): kernels start cold again."""
    global _active
    if _active is not None:
        _active.close()
        _active = None


def active() -> Zygote | None:
    """The zygote kernels of this process fork from, or None for cold kernels."""
    return _active if _active is not None and _active.alive() and not _suspended else None


def spared() -> set[int]:
    """Processes clean-up must not kill: the zygote."""
    return {_active.pid} if _active is not None else set()
