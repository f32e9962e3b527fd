"""autograder/authoring/colab_grade.ipynb, the TA's Colab grading notebook.

Colab itself cannot be reached from here, so the test runs the notebook in a local kernel with
KIT_COLAB_SKIP_SETUP=1 (no Drive, no pip) and parameters pointing at a tiny class; what is left,
finding the kit, building the command and grading, runs for real and must write correct CSVs.
The notebook runs the grader itself, so this test does not use tests/pipeline/grader.py.
"""

from __future__ import annotations

import shutil

import nbformat
import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell

from autograder.authoring import ta_notebook
from autograder.authoring.samples import SUBMISSIONS, expected_failures
from autograder.course import assignments
from autograder.grading.results import autograded_cells
from autograder.paths import REPO, TA_NOTEBOOK
from tests.conftest import read_csv

pytestmark = pytest.mark.pipeline
ASSIGNMENT = "01_tensors"
STUDENTS = ("buggy_fma",)


def test_grades_a_small_class_outside_colab(release, tmp_path, monkeypatch):
    class_dir, out = tmp_path / "class", tmp_path / "grades"
    for student in STUDENTS:
        shutil.copytree(SUBMISSIONS / student / ASSIGNMENT, class_dir / student / ASSIGNMENT)
    nb = nbformat.read(TA_NOTEBOOK, as_version=4)
    at = nb.cells.index(ta_notebook.parameters_cell(nb)) + 1
    nb.cells.insert(at, new_code_cell(
        f"KIT_DIR = {str(REPO)!r}\nMOUNT_DRIVE = False\nSUBMISSIONS = {str(class_dir)!r}\nOUT = {str(out)!r}\n"
        f"ASSIGNMENTS = {ASSIGNMENT!r}\nWORKERS = 1\nEXTRA_FLAGS = '--cell-timeout 45'"))
    monkeypatch.setenv("KIT_COLAB_SKIP_SETUP", "1")
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "not installing anything" in printed and "not mounting Google Drive" in printed
    assert f"--assignments {ASSIGNMENT} --workers 1" in printed or f"--workers 1 --assignments {ASSIGNMENT}" in printed

    points = dict(autograded_cells(assignments()[ASSIGNMENT]))
    failing = expected_failures()[ASSIGNMENT]
    grades = {g["student_id"]: float(g["score"]) for g in read_csv(out / "grades.csv")}
    assert grades == {s: sum(points.values()) - sum(points[g] for g in failing[s]) for s in STUDENTS}
    results = read_csv(out / "results.csv")
    keys = [(r["student_id"], r["grade_id"], r["device"]) for r in results]
    assert len(keys) == len(set(keys)), "a test row was written twice"
    assert {(s, g) for s, g, _ in keys} == {(s, g) for s in STUDENTS for g in points}
    assert {r["grade_id"] for r in results if r["status"] != "passed"} == set(failing["buggy_fma"])
