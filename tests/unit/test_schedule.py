"""Which submissions go to the workers first, and when warm kernels are worth their start."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.course import assignments
from autograder.grading import schedule
from autograder.grading.intake import Submission
from autograder.grading.pipeline import worth_a_zygote
from autograder.grading.report import Timing, write_timings


def submission(student: str, assignment: str) -> Submission:
    return Submission(student, assignment, Path(f"/class/{student}/{assignment}/{assignment}.ipynb"))


def test_longest_first_from_what_the_last_run_into_the_same_out_measured(tmp_path):
    out, typical = tmp_path / "out", tmp_path / "typical.json"
    out.mkdir()
    todo = [submission(s, a) for a in ("01_tensors", "08_data_parallel", "05_tf1_vs_tf2") for s in ("bo", "ada")]
    assert [(s.assignment, s.student) for s in schedule.longest_first(todo, out, typical)][:2] == \
        [("01_tensors", "ada"), ("01_tensors", "bo")], "knowing nothing: name order"

    # the cells' seconds count (the second figure): the first submissions of a run also wait for the zygote,
    # which must not make their assignment look long next time
    write_timings(out, [Timing("ada", "01_tensors", 30.0, 2.0), Timing("bo", "01_tensors", 5.0, 4.0),
                        Timing("cy", "01_tensors", 40.0, 3.0), Timing("ada", "08_data_parallel", 40.0, 38.0)])
    assert schedule.expected_seconds(out, typical) == {"01_tensors": 3.0, "08_data_parallel": 38.0}
    order = [s.assignment for s in schedule.longest_first(todo, out, typical)]
    assert order == ["05_tf1_vs_tf2"] * 2 + ["08_data_parallel"] * 2 + ["01_tensors"] * 2, \
        "never measured first (it may be the longest), then the longest"

    (out / "timings.csv").write_text("not,a\ntimings,file\n")
    assert schedule.longest_first(todo, out, typical) == sorted(todo, key=lambda s: (s.assignment, s.student))


def test_a_new_out_orders_by_the_kits_typical_seconds(tmp_path):
    """A class's first run (a new OUT, a fresh checkout, a benchmark) still grades 07 and 08 first, not last in
    name order; and what another OUT measured (another class, the kit's own tests) does not count."""
    todo = [submission("ada", name) for name in assignments()]
    order = [s.assignment for s in schedule.longest_first(todo, tmp_path / "new")]
    assert order[:2] == ["07_deployment", "08_data_parallel"] and order[-1] == "02_backprop"
    assert set(schedule.expected_seconds()) == set(assignments()), \
        "every notebook needs a typical figure (autograder/grading/typical-seconds.json)"

    (tmp_path / "other").mkdir()
    write_timings(tmp_path / "other", [Timing("ada", "02_backprop", 120.0, 99.0)])  # a class of infinite loops
    assert schedule.longest_first(todo, tmp_path / "new") == schedule.longest_first(todo, tmp_path / "new2")
    assert schedule.longest_first(todo, tmp_path / "other")[0].assignment == "02_backprop", "this OUT's own measure"


def test_the_first_submissions_are_those_a_loading_zygote_can_serve_soonest():
    needs = {"07_deployment": ("torch", "torch._inductor", "onnx", "os"), "08_data_parallel": ("torch", "tensorflow"),
             "04_modules": ("torch", "torch.utils.data", "copy", "multiprocessing"), "02_backprop": ("torch",)}
    order = [submission(s, a) for a in ("07_deployment", "08_data_parallel", "04_modules", "02_backprop")
             for s in ("ada", "bo")]
    warm_start = schedule.warm_start_first(order, 2, needs.__getitem__)
    assert [s.assignment for s in warm_start] == ["04_modules"] * 2 + ["07_deployment"] * 2 + \
        ["08_data_parallel"] * 2 + ["02_backprop"] * 2, "torch only (the standard library is free), the longest"
    assert sorted(warm_start, key=order.index) == order, "the same submissions"
    assert [s.assignment for s in schedule.warm_start_first(order, 3, needs.__getitem__)][:4] == \
        ["04_modules", "04_modules", "02_backprop", "07_deployment"], "one per worker"
    assert schedule.warm_start_first(order, 8, needs.__getitem__) == order, "all at once: no wait to save"
    assert schedule.warm_start_first(order[4:] + order[:4], 2, lambda _: ("torch",)) == order[4:] + order[:4], \
        "all alike: longest first"


def test_the_runs_own_zygote_even_for_one_submission_a_dask_workers_only_for_several():
    assert worth_a_zygote(1, 2, "local") and worth_a_zygote(3, 2, "local"), "started with the command: it pays"
    assert not worth_a_zygote(0, 2, "local"), "nothing to grade"
    assert not worth_a_zygote(2, 2, "dask") and worth_a_zygote(3, 2, "dask"), "started with a worker's first one"


@pytest.mark.skipif(sys.platform == "darwin", reason="MPS has no device file: torch is asked on macOS")
def test_finding_the_devices_to_grade_on_does_not_import_torch():
    """`--devices auto` is resolved at every run's start: from device files, not a 2 s `import torch`."""
    probe = ("import sys; from dlkit.devices import resolve_devices; kinds = resolve_devices('auto'); "
             "print(kinds[0], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["cpu", "False"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are spawned elsewhere")
def test_local_workers_are_forked_with_the_graders_modules_already_imported(tmp_path):
    """On Linux the pool forks its workers from the driver: none re-imports the grader (~2-3 s a run).

    The probe is a module this test file does not import, imported by the driver just before: a
    spawned worker, which imports only what unpickling the task needs, would not have it.
    """
    from autograder.grading.engines import local_engine
    from autograder.isolation.limits import Limits

    importlib.import_module("autograder.grading.class_report")
    with local_engine(2, tmp_path / "logs", Limits(), {}) as pool:
        assert pool.submit(_has_module, "autograder.grading.class_report").result()


def _has_module(name: str) -> bool:
    return name in sys.modules


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_local_workers_never_walk_the_drivers_objects_in_their_collections(tmp_path):
    """What the driver holds when it forks the workers is frozen (gc.freeze): a worker's collections skip it."""
    import gc

    from autograder.grading.engines import local_engine
    from autograder.isolation.limits import Limits

    gc.unfreeze()  # whatever an earlier test froze in this process: only local_engine's own freeze counts
    with local_engine(1, tmp_path / "logs", Limits(), {}) as pool:
        frozen, enabled = pool.submit(_collector_state).result()
    gc.unfreeze()
    assert enabled and frozen > 1000, (frozen, enabled)


def _collector_state() -> tuple[int, bool]:
    import gc

    return gc.get_freeze_count(), gc.isenabled()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_ctrl_c_or_sigterm_to_the_whole_group_leaves_the_workers_to_the_driver(tmp_path):
    """A terminal's Ctrl-C and `timeout`'s SIGTERM reach every process of the run: a worker or the report
    builder that died of it broke its pool under the driver, which then crashed instead of stopping."""
    import os
    import signal

    from autograder.grading.engines import local_engine, spare_cpu_process
    from autograder.isolation.limits import Limits

    with local_engine(1, tmp_path / "logs", Limits(), {}) as pool, spare_cpu_process() as spare:
        for executor in (pool, spare):
            pid = executor.submit(os.getpid).result()
            for signum in (signal.SIGINT, signal.SIGTERM):
                os.kill(pid, signum)
            assert executor.submit(os.getpid).result(timeout=30) == pid, "the process went on"


def test_a_stop_is_remembered_even_where_its_keyboard_interrupt_is_swallowed(monkeypatch):
    import signal

    from autograder.grading import interrupt

    monkeypatch.setattr(interrupt, "_requested", False)
    previous = {signum: signal.getsignal(signum) for signum in interrupt.STOP_SIGNALS}
    try:
        interrupt.stop_on_signals()
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        assert interrupt.requested(), "the driver checks it between two submissions"
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
