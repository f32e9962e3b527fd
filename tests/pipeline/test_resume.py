"""An interrupted class run leaves no process behind, and the same command finishes it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from autograder.paths import ZYGOTE_SCRIPT
from tests.pipeline.grader import copy_samples, finish, start_grader

pytestmark = pytest.mark.pipeline
STUDENTS = ["reference", "buggy_fma"]


def processes_mentioning(*texts: str) -> dict[int, str]:
    """Live processes (pid: command line) whose command line names any of `texts`: a kernel forked by a zygote
    keeps the zygote's command line."""
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(text in args for text in texts) and "pytest" not in args:
            found[int(cmdline.parent.name)] = args[:200]
    return found


def stop_the_driver(run) -> None:
    run.send_signal(signal.SIGINT)  # Ctrl-C, as a TA presses it


def stop_the_whole_group(run) -> None:
    os.killpg(run.pid, signal.SIGTERM)  # as `timeout` or a cancelled CI job stops a command


@pytest.mark.parametrize("stop", [stop_the_driver, stop_the_whole_group])
def test_interrupted_grading_resumes_without_loss_or_double_counting(release, tmp_path, stop):
    class_dir = copy_samples(tmp_path / "class", [(student, "01_tensors") for student in STUDENTS])
    out = tmp_path / "out"
    already = processes_mentioning(str(ZYGOTE_SCRIPT))
    first = start_grader(class_dir, out, "--assignments", "01_tensors", workers=1)
    deadline = time.monotonic() + 300
    while not list((out / ".done").glob("*.json")) and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()
        time.sleep(0.2)
    stop(first)
    err = finish(first, out, expect_status=130, timeout=60).stderr
    assert "run the same command to finish" in err
    time.sleep(1)
    left = {pid: args for pid, args in processes_mentioning(str(out), str(ZYGOTE_SCRIPT)).items() if pid not in already}
    assert not left, f"a worker, zygote or kernel outlived the interrupted run: {left}"
    done_before = len(list((out / ".done").glob("*.json")))
    assert 1 <= done_before < len(STUDENTS)

    second = finish(start_grader(class_dir, out, "--assignments", "01_tensors", workers=1), out, timeout=600)
    assert f"{done_before} submissions already graded" in second.stderr
    keys = [(r["student_id"], r["grade_id"], r["device"]) for r in second.results]
    assert len(keys) == len(set(keys)), "a test was counted twice"
    assert {r["student_id"] for r in second.results} == set(STUDENTS)
    scores = {g["student_id"]: float(g["score"]) for g in second.grades}
    assert scores == {"reference": 12.0, "buggy_fma": 11.0}, \
        [r["message"] for r in second.results if r["status"] != "passed"][:3]
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:  # the class gradebook: each submission once
        recorded = {(s.student.id, s.assignment.name): s.score for s in gb.assignment_submissions("01_tensors")}
    assert recorded == {(student, "01_tensors"): score for student, score in scores.items()}
