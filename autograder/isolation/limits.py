"""Limits on what one submission may consume, and clean-up of whatever it leaves running.

Applied in each grading worker process, so every kernel the worker starts inherits them, and in the
run's zygote, so every kernel it forks does (process_rlimits):
- memory: RLIMIT_DATA caps each process's private writable memory (what malloc, NumPy and torch's
  CPU tensors take), so a memory bomb raises MemoryError in the student's cell instead of waking
  the kernel's OOM killer, which could hit anybody. Unlike RLIMIT_AS it leaves alone address
  space that is only reserved (PROT_NONE): CUDA, NCCL and JAX reserve tens of GiB and fail to
  start under an address-space cap. It does not count shared memory (`mmap.mmap(-1, n)`, files
  in /dev/shm), and it is per process: the watchdog (watchdog.py) caps a submission's processes together,
  shared memory included;
- files: RLIMIT_FSIZE caps the size of any file the kernel writes; RLIMIT_CORE stops core dumps;
- processes: sandboxed kernels run under RLIMIT_NPROC (sandbox.py sets it, since it counts the
  processes and threads of the kernel's own uid); the worker becomes a "child subreaper", so a
  process a submission starts and detaches (double fork, setsid) is re-parented to the worker,
  which kills it after grading. A warm kernel has a keeper of its own that does the same for it
  (execution/zygote.py).
Time limits are enforced while executing (see preprocessors.GuardedExecute).
"""

from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import dataclass

import psutil
from traitlets.config import Config

_PR_SET_CHILD_SUBREAPER = 36


@dataclass(frozen=True)
class Limits:
    """What one submission may use. Defaults suit these notebooks on a 2-core, 24 GiB machine."""

    cell_timeout: int = 120          # seconds for one cell
    notebook_timeout: int = 600      # seconds for the whole notebook
    memory_bytes: int = 8 * 2**30    # private writable memory of each process of the kernel (and of the worker)
    # Processes + threads of one sandboxed kernel, its children included. The references of notebooks
    # 04-08 peaked at 57 (08, with its DDP ranks) on 2 cores; thread pools (torch, TensorFlow, each
    # DDP rank's) grow with the cores. Low enough that a fork bomb of copies of a ~1 GB kernel stops
    # within seconds rather than loading a small grading machine with a thousand forks.
    processes: int = max(256, 16 * (os.cpu_count() or 1))
    file_bytes: int = 1 * 2**30      # largest file the kernel may write
    scratch_bytes: int = 1 * 2**30   # the sandbox's /tmp, /var/tmp, /dev/shm and home together; and its workdir
    output_bytes: int = 1 * 2**20    # outputs kept per cell; more is dropped with a note

    def nbgrader_config(self) -> Config:
        """The time and output limits as nbgrader settings: the one mapping, used by nbgrader_config.py
        (defaults) and by every grading workspace (the limits of the run)."""
        config = Config()
        config.Execute.timeout = self.cell_timeout
        config.GuardedExecute.notebook_timeout = self.notebook_timeout
        config.GuardedExecute.max_output_bytes = self.output_bytes
        return config


_LIMITED = {"RLIMIT_DATA": "memory", "RLIMIT_FSIZE": "file size", "RLIMIT_CORE": "core dumps"}


def process_rlimits(limits: Limits) -> dict[str, int]:
    """The resource limits (soft and hard alike) of every process of a submission, by resource name: set on
    each grading worker (apply_process_limits) and on the zygote that forks warm kernels (warm.py)."""
    return {"RLIMIT_DATA": limits.memory_bytes, "RLIMIT_FSIZE": limits.file_bytes, "RLIMIT_CORE": 0}


def apply_process_limits(limits: Limits) -> list[str]:
    """Set the resource limits on this process (inherited by kernels); return warnings for any that failed."""
    warnings = []
    for name, value in process_rlimits(limits).items():
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError) as err:
            warnings.append(f"could not limit {_LIMITED[name]}: {err}")
    try:
        become_subreaper()
    except (OSError, AttributeError) as err:
        warnings.append(f"processes a submission detaches may outlive grading: {err}")
    return warnings


def become_subreaper() -> None:
    """Adopt every orphaned descendant (Linux), so kill_descendants can find detached processes."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def kill_descendants(grace: float = 0.5, spare: set[int] = frozenset(), root: psutil.Process | None = None) -> int:
    """SIGKILL every process below this one, or below `root` (kernels and whatever they left), except
    `spare` and what runs below them; return how many were killed."""
    killed = 0
    for _ in range(5):  # a dying process can re-parent its own children to us: repeat until none
        found = _descendants(spare, root or psutil.Process())
        if not found:
            break
        for process in found:
            try:
                process.kill()  # psutil first checks the pid was not reused by another process
                killed += 1
            except psutil.NoSuchProcess:
                pass
        # Collects the exit of each killed child; those that are not our children vanish with their parent.
        psutil.wait_procs(found, timeout=grace)
    return killed


def _descendants(spare: set[int], root: psutil.Process) -> list[psutil.Process]:
    """Every process below `root`, except `spare` and what runs below them."""
    found, todo = [], [root]
    while todo:
        try:
            children = todo.pop().children()
        except psutil.NoSuchProcess:  # gone since its parent listed it: its children come to us
            continue
        for child in children:
            if child.pid not in spare:
                found.append(child)
                todo.append(child)
    return found
