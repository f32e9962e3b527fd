"""The kit's grades equal stock, sequential `nbgrader autograde` on the same class."""

from __future__ import annotations

import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder.course import REPO
from autograder.intake import discover
from autograder.samples import SUBMISSIONS
from bench.stock_nbgrader import grade_with_stock_nbgrader, scores

pytestmark = pytest.mark.pipeline

COHORT = {"01_tensors": ["reference", "buggy_fma", "buggy_kernel_flip"],
          "02_backprop": ["reference", "buggy_relu_mask", "buggy_softmax_no_max"]}


def wrote_to_stderr(cell) -> bool:
    return any(o.get("output_type") == "stream" and o.get("name") == "stderr" for o in cell.get("outputs", []))


def test_kit_grades_equal_stock_nbgrader(release, tmp_path):
    class_dir = tmp_path / "class"
    for assignment, students in COHORT.items():
        for student in students:
            shutil.copytree(SUBMISSIONS / student / assignment, class_dir / student / assignment)
    submissions = discover(class_dir, set(COHORT))
    stock = grade_with_stock_nbgrader(submissions, tmp_path / "stock", cell_timeout=120)

    out = tmp_path / "kit"
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--workers", "2"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    kit = scores(out)  # the kit's class gradebook, read exactly as the stock one

    assert set(kit) == set(stock) and len(stock) > 20
    assert any(score == 0 for score in stock.values()), "the cohort should include failing tests"
    for key in sorted(k for k in stock if stock[k] != kit[k]):
        # The one deliberate difference: nbgrader zeroes a passing test that wrote to stderr (a warning).
        student, assignment, grade_id = key
        graded = nbformat.read(tmp_path / "stock" / "autograded" / student / assignment / f"{assignment}.ipynb", 4)
        cell = next(c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
        assert stock[key] == 0 and wrote_to_stderr(cell) and not any(
            o.get("output_type") == "error" for o in cell.outputs), f"{key}: stock {stock[key]}, kit {kit[key]}"
