"""The student release, built by nbgrader: no solution and no hidden test reaches it."""

from __future__ import annotations

import nbformat
import pytest

from autograder.course import assignments

BLOCKS = {"solution": ("### BEGIN SOLUTION", "### END SOLUTION"),
          "hidden test": ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")}


def split_source(source_nb) -> tuple[dict[str, set[str]], set[str]]:
    """Lines inside each kind of secret block, and the lines outside every block."""
    secret = {kind: set() for kind in BLOCKS}
    public = set()
    for cell in source_nb.cells:
        inside = None
        for line in cell.source.splitlines():
            stripped = line.strip()
            for kind, (begin, end) in BLOCKS.items():
                if stripped == begin:
                    inside = kind
                elif stripped == end:
                    inside = None
            if stripped in {m for pair in BLOCKS.values() for m in pair}:
                continue
            (secret[inside] if inside else public).add(stripped)
    return secret, public


@pytest.mark.parametrize("name", list(assignments()))
def test_release_has_no_solution_or_hidden_test_text(release, name):
    source = nbformat.read(assignments()[name], as_version=4)
    released = release[name].read_text()
    secret, public = split_source(source)
    assert secret["solution"] and secret["hidden test"], "the source should have solutions and hidden tests"
    for kind, lines in secret.items():
        leaked = [line for line in lines - public if len(line) > 8 and line in released]
        assert not leaked, f"{kind} text leaked into the release of {name}: {leaked[:3]}"
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in released


@pytest.mark.parametrize("name", list(assignments()))
def test_release_keeps_every_exercise_and_test_cell(release, name):
    def graded_ids(nb, key):
        return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get(key)]

    source = nbformat.read(assignments()[name], as_version=4)
    student = nbformat.read(release[name], as_version=4)
    assert graded_ids(student, "solution") == graded_ids(source, "solution")
    assert graded_ids(student, "grade") == graded_ids(source, "grade")
    for cell in student.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            assert "raise NotImplementedError()" in cell.source, cell.metadata["nbgrader"]["grade_id"]
