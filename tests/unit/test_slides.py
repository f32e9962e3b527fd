"""Lecture slides: the committed cuts follow the rules, and solutions show as clean code or as the students'
stub (tests/pipeline/test_slides.py builds a deck; tests/unit/test_slide_layout.py fits slides to the frame)."""

from __future__ import annotations

import nbformat
import pytest
from nbgrader.utils import is_solution

from autograder.authoring.samples import solution_sources
from autograder.authoring.slides import mark_slides, present_solutions
from autograder.course import assignments, grade_id_of

MARKERS = ("BEGIN SOLUTION", "END SOLUTION")


@pytest.mark.parametrize("name", list(assignments()))
def test_committed_slide_cuts_follow_the_rules(name):
    nb = nbformat.read(assignments()[name], as_version=4)
    assert not mark_slides(nb), f"{name}: slide cuts are stale; run `python -m autograder.authoring.slides --mark`"


def solution_cells(nb: nbformat.NotebookNode) -> dict[str, str]:
    return {grade_id_of(cell): cell.source for cell in nb.cells if is_solution(cell) and cell.cell_type == "code"}


@pytest.mark.parametrize("name", list(assignments()))
def test_solutions_show_as_clean_code_or_as_the_students_stub(name):
    source = nbformat.read(assignments()[name], as_version=4)
    with_solutions = solution_cells(present_solutions(source))
    with_stubs = solution_cells(present_solutions(source, with_solutions=False))
    assert with_solutions == solution_sources(assignments()[name]), "the solution, less nbgrader's marker lines"
    for grade_id, stub in with_stubs.items():
        assert not any(marker in code for code in (stub, with_solutions[grade_id]) for marker in MARKERS), grade_id
        assert "raise NotImplementedError()" in stub, f"{grade_id}: the release's stub"
        assert with_solutions[grade_id].splitlines()[-1] not in stub, f"{grade_id}: the solution still shows"
    assert any(marker in cell for cell in solution_cells(source).values() for marker in MARKERS), \
        "the sources carry the markers the slides must not show"
