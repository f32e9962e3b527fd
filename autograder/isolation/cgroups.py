"""A memory cgroup per kernel, where the grader may create one: the memory backstop that acts before an
allocation lands, not after (the watchdog, watchdog.py, looks 5 times a second).

A root grader creates `kit/<kernel>` under the memory controller (cgroup v2's unified hierarchy, or v1's
memory hierarchy), with the kernel's memory limit plus its scratch (tmpfs pages are charged to the
group that writes them) and no swap; the sandbox moves the kernel into it before dropping its
privileges (sandbox.py), so every process the kernel starts is in it too, and the kernel's own
OOM kill hits only the submission. After the kernel is gone the grader removes the group. An
ordinary user, or a container without cgroup write access, gets None here and relies on the watchdog.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
PARENT = "kit"


def _hierarchy() -> tuple[str, Path] | None:
    """("v2", root) or ("v1", the memory hierarchy's root) where memory groups can be made; None elsewhere."""
    if (CGROUP_FS / "cgroup.controllers").exists():
        if "memory" in (CGROUP_FS / "cgroup.controllers").read_text().split():
            return "v2", CGROUP_FS
        return None
    if (CGROUP_FS / "memory" / "memory.limit_in_bytes").exists():
        return "v1", CGROUP_FS / "memory"
    return None


def create(name: str, limit_bytes: int) -> Path | None:
    """A new memory group `kit/<name>` limited to `limit_bytes` (no swap), or None where this grader may not
    make one."""
    if os.geteuid() != 0 or (found := _hierarchy()) is None:
        return None
    version, root = found
    group = root / PARENT / name
    try:
        group.mkdir(parents=True, exist_ok=True)
        if version == "v2":
            enabled = (root / PARENT / "cgroup.subtree_control").read_text().split()
            if "memory" not in enabled:
                (root / PARENT / "cgroup.subtree_control").write_text("+memory")
            (group / "memory.max").write_text(str(limit_bytes))
            (group / "memory.swap.max").write_text("0")
        else:
            (group / "memory.limit_in_bytes").write_text(str(limit_bytes))
            try:  # memory and swap together, where the kernel accounts swap
                (group / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
            except OSError:
                pass
    except OSError:
        remove(group)
        return None
    return group


def remove_left(prefix: str) -> None:
    """Remove every empty group `kit/<prefix>*` a kernel left behind (its provisioner's cleanup may not have run:
    a run stopped, a kernel whose processes took longer to exit than `remove` waits)."""
    found = _hierarchy()
    if found is None or os.geteuid() != 0:
        return
    for group in (found[1] / PARENT).glob(f"{prefix}*"):
        try:
            group.rmdir()  # refused while a process is still in it
        except OSError:
            pass


def oom_killed(group: Path) -> bool:
    """Whether the kernel's OOM killer killed a process of `group` for reaching its limit."""
    for name in ("memory.events", "memory.oom_control"):  # v2, v1
        try:
            lines = (group / name).read_text().splitlines()
        except OSError:
            continue
        counts = dict(line.split()[:2] for line in lines if len(line.split()) >= 2)
        return int(counts.get("oom_kill", "0")) > 0
    return False


def remove(group: Path, wait: float = 2.0) -> None:
    """Remove `group` once its processes are gone (they may still be exiting); leave it if they never go."""
    deadline = time.monotonic() + wait
    while True:
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.02)
