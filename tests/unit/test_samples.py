"""The sample class and its expectations agree, and warnings on stderr never cost a passing test its points."""

from __future__ import annotations

from nbformat.v4 import new_code_cell, new_output
from nbgrader.utils import determine_grade

from autograder.authoring.samples import SUBMISSIONS, expected_failures
from autograder.grading.preprocessors import KeepWarningsFromCostingPoints


def test_every_sample_submission_has_an_expected_outcome():
    on_disk = {(p.parent.parent.name, p.parent.name) for p in SUBMISSIONS.glob("*/*/*.ipynb")}
    assert on_disk == {(s, a) for a, per in expected_failures().items() for s in per}


def test_warnings_on_stderr_keep_a_passing_tests_points():
    # nbgrader on its own: a passing test cell that printed to stderr scores 0.
    cell = new_code_cell("check()", metadata={"nbgrader": {"grade": True, "grade_id": "t", "points": 2,
                                                            "solution": False, "locked": True}})
    cell.outputs = [new_output("stream", name="stderr", text="DeprecationWarning: old API\n")]
    assert determine_grade(cell) == (0, 2)
    cell, _ = KeepWarningsFromCostingPoints().preprocess_cell(cell, {}, 0)
    assert determine_grade(cell) == (2, 2)
    # A real failure still fails.
    cell.outputs.append(new_output("error", ename="AssertionError", evalue="off", traceback=[]))
    assert determine_grade(cell) == (0, 2)
