"""A backstop on what one kernel holds in total: its processes' memory and its working folder's size.

RLIMIT_DATA (limits.py) caps each process's private memory, but not memory shared between processes
(`mmap(-1, n, MAP_SHARED)`, SysV segments) and not a submission's processes taken together; the
sandbox's scratch tmpfs is capped by its size, but the kernel's working folder (its IPC sockets live
there, so it is the host's) is not. The watchdog runs in the grading worker, outside every namespace
the kernel has, and looks at facts the kernel cannot forge: the proportional set size (PSS: shared
pages split between the processes sharing them) of every process below the kernel, read from
/proc, and the bytes in the working folder. Past a limit it kills the kernel (PID 1 of its namespace:
everything in it dies) and remembers why, which GuardedExecute puts in the student's error row.

Where the grader may create a memory cgroup (a root grader, cgroups.py), the cgroup limits memory,
stopping an allocation before it lands rather than within a polling interval, and the watchdog
watches only the folder; elsewhere (an ordinary user, most containers) it is the memory backstop.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import psutil

#: Seconds between two looks. A process allocating at full speed (~5 GB/s) can pass the limit by about
#: this much times that before it is killed; RLIMIT_DATA still stops any single process first.
INTERVAL = 0.2


def pss_bytes(pid: int) -> int:
    """A process's proportional set size, or its resident size where smaps_rollup is missing; 0 once gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return psutil.Process(pid).memory_info().rss
    except psutil.Error:
        return 0


def tree_memory(root: int) -> int:
    """The memory of `root` and every process below it, in bytes."""
    try:
        processes = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.Error:
        return 0
    return sum(pss_bytes(p.pid) for p in processes)


def folder_bytes(folder: Path) -> int:
    """Bytes of the regular files under `folder` (not following links)."""
    total = 0
    for dirpath, _, filenames in os.walk(folder):
        for name in filenames:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue
    return total


def describe(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.0f} MiB"


class Watchdog:
    """Watches one kernel from its start until its process is gone or `stop` is called."""

    def __init__(self, root: int, memory_bytes: int | None, folder: Path | None, folder_bytes_limit: int,
                 kill) -> None:
        """Watch `root`'s processes' memory (unless `memory_bytes` is None: a cgroup limits it) and `folder`'s size
        (unless None); past a limit, call `kill`."""
        self.root, self.memory_bytes = root, memory_bytes
        self.folder, self.folder_bytes_limit = folder, folder_bytes_limit
        self.kill = kill
        self.tripped: str | None = None  # why the kernel was killed, in words a student understands
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"watchdog-{root}", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(INTERVAL) and psutil.pid_exists(self.root):
            why = self.check()
            if why:
                self.tripped = why
                self.kill()
                return

    def check(self) -> str | None:
        """Why the kernel must be killed now, or None."""
        used = tree_memory(self.root) if self.memory_bytes is not None else 0
        if self.memory_bytes is not None and used > self.memory_bytes:
            return (f"the kernel's processes held {describe(used)} of memory together, past the limit of "
                    f"{describe(self.memory_bytes)} a submission may use (shared memory included)")
        if self.folder is not None:
            written = folder_bytes(self.folder)
            if written > self.folder_bytes_limit:
                return (f"the kernel wrote {describe(written)} into its working folder, past the limit of "
                        f"{describe(self.folder_bytes_limit)} a submission may write")
        return None

    def stop(self) -> None:
        self._stop.set()
