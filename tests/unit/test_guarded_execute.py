"""grading/preprocessors.py GuardedExecute on notebooks of a few cells, in real kernels, with tiny limits.

A submission costs only its own points: a cell past its time is interrupted and the rest runs; a
kernel that ignores the interrupt, or dies, costs only the cells that did not run, each saying
why; the notebook's budget caps every cell; output past the budget is dropped with a note; and a
failure before any student code ran is the grading machine's (KernelStartFailure), never a zero.
Kernels start unsandboxed here (no sandbox_workdir); the sandbox has tests of its own.
"""

from __future__ import annotations

import shutil
import time

import pytest
from nbformat.v4 import new_code_cell
from traitlets.config import Config

from autograder.grading.preprocessors import KERNEL_DIED, NOT_RUN, NOTEBOOK_TIMEOUT, GuardedExecute, KernelStartFailure
from autograder.isolation import cgroups, sandbox

from .notebooks import notebook

GRADER_CELL = "pass  # stands for GuardTests' snapshot, the first cell"
IGNORES_INTERRUPTS = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True: pass"


def execute(tmp_path, sources: list[str], cell_timeout: int = 30, notebook_timeout: int = 120,
            max_output_bytes: int = 2**20, kernel: str = "python3"):
    """The notebook of `sources` (after the grader's cell) as GuardedExecute leaves it, and the seconds it took."""
    config = Config()
    config.Execute.timeout = cell_timeout
    config.GuardedExecute.notebook_timeout = notebook_timeout
    config.GuardedExecute.max_output_bytes = max_output_bytes
    config.GuardedExecute.stuck_grace = 1.0
    nb = notebook(*(new_code_cell(s) for s in [GRADER_CELL, *sources]))
    nb.metadata.kernelspec.name = kernel
    start = time.monotonic()
    nb, _ = GuardedExecute(config=config).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    return nb, time.monotonic() - start


def errors(cell) -> list[tuple[str, str]]:
    return [(o.ename, o.evalue) for o in cell.outputs if o.output_type == "error"]


def text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.fixture(scope="module")
def overrun(tmp_path_factory):
    """One kernel through: an output flood, an interruptible endless loop, a cell after it, an
    endless loop that ignores the interrupt, and a cell after that."""
    nb, seconds = execute(tmp_path_factory.mktemp("overrun"), [
        "for i in range(200):\n    print(f'{i:03d}' + 'x' * 97, flush=True)",
        "while True: pass",
        "print('after the interrupt')",
        IGNORES_INTERRUPTS,
        "print('never printed')",
    ], cell_timeout=2, max_output_bytes=2000)
    return nb.cells[1:], seconds


def test_output_past_the_budget_is_dropped_with_one_note(overrun):
    flood = text(overrun[0][0])
    assert flood.startswith("000" + "x" * 97)
    assert flood.count("[the grader dropped this cell's output beyond 2000 bytes]") == 1
    assert "199" + "x" * 97 not in flood and len(flood) < 2500


def test_a_cell_past_its_time_is_a_timeout_and_the_next_cell_still_runs(overrun):
    cells = overrun[0]
    assert ("CellTimeoutError", "") in errors(cells[1])
    assert text(cells[2]) == "after the interrupt\n" and not errors(cells[2])


def test_a_kernel_ignoring_the_interrupt_is_killed_and_the_rest_says_why_it_did_not_run(overrun):
    cells, seconds = overrun
    assert errors(cells[3]) == [("CellTimeoutError", "ran past the 2 s limit and ignored the interrupt")]
    why = "not run: cell 4 ran past the time limit and its kernel ignored the interrupt"
    assert errors(cells[4]) == [(NOT_RUN, why)]
    assert "never printed" not in text(cells[4])
    assert seconds < 30, "the stuck kernel was given up on after the grace, not waited for"


def test_a_dead_kernel_costs_only_the_cells_that_did_not_run(tmp_path):
    nb, _ = execute(tmp_path, ["print('ran')", "import os\nos._exit(3)", "print('never printed')"])
    ran, died, after = nb.cells[1:]
    assert text(ran) == "ran\n" and not errors(ran)
    assert [name for name, _ in errors(died)] == [KERNEL_DIED]
    assert errors(after) == [(NOT_RUN, "not run: the kernel died while running cell 2")]


def test_the_notebook_budget_caps_a_cell_and_stops_the_cells_after_it(tmp_path):
    nb, seconds = execute(tmp_path, ["import time\ntime.sleep(60)", "print('never printed')"],
                          cell_timeout=60, notebook_timeout=7)
    sleeper, after = nb.cells[1:]
    assert ("CellTimeoutError", "") in errors(sleeper), "the cell's own 60 s gave way to what was left of the 7 s"
    assert errors(after) == [(NOTEBOOK_TIMEOUT, "not run: the notebook ran past its 7 s limit")]
    assert seconds < 20


def test_a_failure_in_the_graders_first_cell_is_the_machines_not_the_students(tmp_path):
    nb = notebook(new_code_cell("raise ImportError('no dlkit in this kernel')"), new_code_cell("x = 1"))
    with pytest.raises(KernelStartFailure, match="the grader's first cell failed in the kernel: ImportError"):
        GuardedExecute().preprocess(nb, {"metadata": {"path": str(tmp_path)}})


def test_a_kernel_that_cannot_start_is_the_machines_failure(tmp_path):
    with pytest.raises(KernelStartFailure, match="the kernel did not start: NoSuchKernel"):
        execute(tmp_path, ["x = 1"], kernel="no-such-kernel")


@pytest.mark.skipif(sandbox.unavailable_reason() is not None, reason="no sandbox here")
@pytest.mark.parametrize("backstop", ["cgroup where the grader may make one", "watchdog"])
def test_a_sandboxed_kernel_past_its_scratch_or_memory_is_told_which_limit(tmp_path, monkeypatch, backstop):
    """The private scratch full: the student's error names the scratch limit. The kernel's processes past the
    memory limit together (shared memory, which RLIMIT_DATA does not count): the grader kills the kernel (its
    cgroup where the grader may make one, else the watchdog) and says which limit."""
    if backstop == "watchdog":  # as for an ordinary user's grader, who may not make cgroups
        monkeypatch.setattr(cgroups, "create", lambda name, limit: None)
    workdir = sandbox.make_workdir()
    try:
        config = Config()
        config.Execute.timeout = 60
        config.SandboxedKernelManager.sandbox_workdir = str(workdir)
        config.SandboxedKernelManager.sandbox_keep = [str(p) for p in sandbox.default_keep()]
        config.SandboxedKernelManager.sandbox_scratch_bytes = 8 * 2**20
        config.SandboxedKernelManager.memory_bytes = 300 * 2**20
        nb = notebook(*(new_code_cell(s) for s in [
            GRADER_CELL, "open('/tmp/big', 'wb').write(b'x' * (16 * 2**20))",
            "import mmap, time\nm = mmap.mmap(-1, 900 * 2**20)\nfor i in range(0, len(m), 4096): m[i] = 1\n"
            "time.sleep(30)"]))
        nb, _ = GuardedExecute(config=config).preprocess(nb, {"metadata": {"path": str(tmp_path)}})
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    full, hoarder = nb.cells[1:]
    assert [name for name, _ in errors(full)] == ["OSError"] and "8 MiB: the scratch limit" in errors(full)[0][1]
    assert [name for name, _ in errors(hoarder)] == [KERNEL_DIED]
    why = errors(hoarder)[0][1]
    assert why.startswith("the grader killed the kernel") and "memory" in why and "limit of 300 MiB" in why, why
