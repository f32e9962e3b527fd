"""The kit's grades equal stock, sequential `nbgrader autograde` on the same class."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from autograder.authoring.samples import SUBMISSIONS
from autograder.grading.intake import discover
from autograder.paths import REPO
from bench.stock_nbgrader import grade_with_stock_nbgrader, scores, unexplained_differences

pytestmark = pytest.mark.pipeline

COHORT = {"01_tensors": ["reference", "buggy_fma", "buggy_kernel_flip"],
          "02_backprop": ["reference", "buggy_relu_mask", "buggy_softmax_no_max"]}


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

    assert len(stock) > 20 and any(score == 0 for score in stock.values()), "the cohort should include failing tests"
    assert unexplained_differences(tmp_path / "stock", stock, kit) == []
