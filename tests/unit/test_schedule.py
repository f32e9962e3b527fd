"""Which submissions go to the workers first, and when warm kernels are worth their start."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.grading import schedule
from autograder.grading.intake import Submission
from autograder.grading.pipeline import worth_a_zygote
from autograder.grading.report import Timing


def submission(student: str, assignment: str) -> Submission:
    return Submission(student, assignment, Path(f"/class/{student}/{assignment}/{assignment}.ipynb"))


def test_longest_first_from_what_earlier_runs_measured(tmp_path):
    history = tmp_path / "seconds.json"
    todo = [submission(s, a) for a in ("01_tensors", "08_data_parallel", "05_tf1_vs_tf2") for s in ("bo", "ada")]
    assert [(s.assignment, s.student) for s in schedule.longest_first(todo, history)][:2] == \
        [("01_tensors", "ada"), ("01_tensors", "bo")], "without history: name order"

    schedule.remember([Timing("ada", "01_tensors", 3.0, 2.0), Timing("bo", "01_tensors", 5.0, 4.0),
                       Timing("cy", "01_tensors", 4.0, 3.0), Timing("ada", "08_data_parallel", 40.0, 38.0)], history)
    assert schedule.expected_seconds(history) == {"01_tensors": 4.0, "08_data_parallel": 40.0}
    order = [s.assignment for s in schedule.longest_first(todo, history)]
    assert order == ["05_tf1_vs_tf2"] * 2 + ["08_data_parallel"] * 2 + ["01_tensors"] * 2, \
        "never measured first (it may be the longest), then the longest"

    schedule.remember([Timing("ada", "05_tf1_vs_tf2", 20.0, 18.0)], history)
    assert schedule.expected_seconds(history) == {"01_tensors": 4.0, "05_tf1_vs_tf2": 20.0, "08_data_parallel": 40.0}
    history.write_text("not json")
    assert schedule.longest_first(todo, history) == sorted(todo, key=lambda s: (s.assignment, s.student))


def test_a_zygote_only_where_a_worker_grades_more_than_one_submission():
    assert not worth_a_zygote(1, 1) and not worth_a_zygote(2, 2)
    assert worth_a_zygote(2, 1) and worth_a_zygote(3, 2)


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
