"""An interrupted class run leaves no process behind, and the same command finishes it."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from autograder.authoring.samples import SUBMISSIONS
from autograder.paths import REPO

from .conftest import read_csv

pytestmark = pytest.mark.pipeline
STUDENTS = ["reference", "buggy_fma", "buggy_pool_zero"]


def grade(class_dir: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--workers", "1",
                             "--assignments", "01_tensors"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args and "pytest" not in args:
            found.append(args[:200])
    return found


def test_interrupted_grading_resumes_without_loss_or_double_counting(release, tmp_path):
    class_dir = tmp_path / "class"
    for student in STUDENTS:
        shutil.copytree(SUBMISSIONS / student, class_dir / student)
    out = tmp_path / "out"
    first = grade(class_dir, out)
    deadline = time.monotonic() + 300
    while not list((out / ".done").glob("*.json")) and time.monotonic() < deadline:
        assert first.poll() is None, first.communicate()
        time.sleep(0.2)
    first.send_signal(signal.SIGINT)
    _, err = first.communicate(timeout=60)
    assert first.returncode == 130, err
    assert "run the same command to finish" in err
    time.sleep(1)
    assert not processes_mentioning(str(out)), "a worker or kernel outlived the interrupted run"
    done_before = len(list((out / ".done").glob("*.json")))
    assert 1 <= done_before < len(STUDENTS)

    second = grade(class_dir, out)
    _, err = second.communicate(timeout=600)
    assert second.returncode == 0, err
    assert f"{done_before} submissions already graded" in err
    rows = read_csv(out / "results.csv")
    keys = [(r["student_id"], r["grade_id"], r["device"]) for r in rows]
    assert len(keys) == len(set(keys)), "a test was counted twice"
    assert {r["student_id"] for r in rows} == set(STUDENTS)
    scores = {g["student_id"]: float(g["score"]) for g in read_csv(out / "grades.csv")}
    assert scores == {"reference": 12.0, "buggy_fma": 11.0, "buggy_pool_zero": 11.0}, [r["message"] for r in rows if r["status"] != "passed"][:3]
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:  # the class gradebook: each submission once
        recorded = {(s.student.id, s.assignment.name): s.score for s in gb.assignment_submissions("01_tensors")}
    assert recorded == {(student, "01_tensors"): score for student, score in scores.items()}
