"""The kit's grades equal stock, sequential `nbgrader autograde` on the same submissions.

The kit's side is the compact class's run; stock nbgrader grades a cohort of it again, one
submission at a time, and every test cell they both graded must score the same but for the
documented differences (bench.stock_nbgrader.unexplained_differences).
"""

from __future__ import annotations

import pytest

from autograder.grading.intake import discover
from bench.stock_nbgrader import grade_with_stock_nbgrader, scores, unexplained_differences
from tests.pipeline.compact_class import SELECTED, first_buggy

pytestmark = pytest.mark.pipeline

#: Two assignments' references and first buggy samples.
COHORT = {a: ["reference", first_buggy(a)] for a in ("01_tensors", "02_backprop") if a in SELECTED}


def test_kit_grades_equal_stock_nbgrader(graded, class_dir, tmp_path):
    if not COHORT:
        pytest.skip("KIT_ASSIGNMENTS selects neither 01_tensors nor 02_backprop")
    submissions = [s for s in discover(class_dir, set(COHORT)) if s.student in COHORT.get(s.assignment, [])]
    stock = grade_with_stock_nbgrader(submissions, tmp_path / "stock", cell_timeout=120)
    kit = {key: score for key, score in scores(graded.out).items() if key[0] in COHORT.get(key[1], [])}

    assert len(stock) > 10 and any(score == 0 for score in stock.values()), "the cohort should include failing tests"
    assert unexplained_differences(tmp_path / "stock", stock, kit) == []
