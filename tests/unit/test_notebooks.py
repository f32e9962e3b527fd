"""The instructor sources follow the kit's conventions (see docs/instructors.md)."""

from __future__ import annotations

import nbformat
import pytest

from autograder.authoring.samples import SUBMISSIONS, solution_sources
from autograder.course import assignments

NOTEBOOKS = list(assignments())


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_source_is_committed_clean(name):
    nb = nbformat.read(assignments()[name], as_version=4)
    nbformat.validate(nb)
    dirty = [c.id for c in nb.cells if c.cell_type == "code" and (c.outputs or c.execution_count)]
    assert not dirty, f"{name}: clear the outputs of {dirty} before committing"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_exercise_has_tests_and_every_test_has_hidden_checks(name):
    nb = nbformat.read(assignments()[name], as_version=4)
    ids = [nbgrader_meta(c)["grade_id"] for c in nb.cells if nbgrader_meta(c)]
    assert len(ids) == len(set(ids)), f"duplicate grade_id in {name}"
    solutions = [c for c in nb.cells if nbgrader_meta(c).get("solution")]
    tests = [c for c in nb.cells if nbgrader_meta(c).get("grade")]
    assert solutions and tests
    for cell in solutions:
        assert cell.source.lstrip().startswith(("def ", "class ")), "one function or class per solution cell"
        defined = cell.source.split("(")[0].split()[-1]
        assert defined == nbgrader_meta(cell)["grade_id"], "a solution cell's grade_id is the name it defines"
        assert any(defined in t.source for t in tests), f"no test cell calls {defined}"
    for cell in tests:
        assert nbgrader_meta(cell)["points"] > 0 and nbgrader_meta(cell)["locked"]
        # A test made of visible checks alone can be passed by hard-coding the visible answers.
        if "### BEGIN HIDDEN TESTS" not in cell.source:
            grade_id = nbgrader_meta(cell)["grade_id"]
            assert "lecture" in grade_id, f"{grade_id} has no hidden checks"


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_reference_submission_matches_the_instructor_solutions(name):
    reference = nbformat.read(SUBMISSIONS / "reference" / name / f"{name}.ipynb", as_version=4)
    submitted = {nbgrader_meta(c)["grade_id"]: c.source for c in reference.cells if nbgrader_meta(c).get("solution")}
    assert submitted == solution_sources(assignments()[name]), \
        "the reference submission is stale: run `python -m autograder.authoring.samples`"
