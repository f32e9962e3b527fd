"""Sample submissions: the reference student, made from the instructor source, and the expectations file.

The reference submission is the student release with every solution cell filled in with the
instructor's solution, exactly what a perfect student would hand in. Regenerate it after
changing a solution:  python -m autograder.authoring.samples [assignment ...]

Buggy samples are made by copying the reference folder and editing one solution in Jupyter;
autograder/expected/<assignment>.toml lists the test cells each sample must fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import tomllib
from nbgrader.utils import is_solution

from autograder.course import assignments, grade_id_of
from autograder.paths import EXPECTED, RELEASE, SUBMISSIONS

_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def without_solution_markers(source: str) -> str:
    """A solution cell's code without nbgrader's `### BEGIN SOLUTION` and `### END SOLUTION` lines."""
    return "\n".join(line for line in source.splitlines() if line.strip() not in _MARKERS)


def solution_sources(source: Path) -> dict[str, str]:
    """The instructor's solution cells, markers removed, by grade_id."""
    return {grade_id_of(cell): without_solution_markers(cell.source)
            for cell in nbformat.read(source, as_version=4).cells if is_solution(cell) and cell.cell_type == "code"}


def fill_release(assignment: str, answers: dict[str, str]) -> nbformat.NotebookNode:
    """The release notebook of `assignment` with the solution cells named in `answers` replaced."""
    nb = nbformat.read(RELEASE / assignment / f"{assignment}.ipynb", as_version=4)
    for cell in nb.cells:
        if (name := grade_id_of(cell)) in answers:
            cell.source = answers[name]
    return nb


def reference_submission(assignment: str) -> nbformat.NotebookNode:
    """What a student who wrote every instructor solution would submit."""
    return fill_release(assignment, solution_sources(assignments()[assignment]))


def _expected_files() -> dict[str, dict]:
    """The parsed autograder/expected/<assignment>.toml files, by assignment."""
    expected = {}
    for path in sorted(EXPECTED.glob("*.toml")):
        with open(path, "rb") as f:
            expected[path.stem] = tomllib.load(f)
    return expected


def expected_failures() -> dict[str, dict[str, list[str]]]:
    """{assignment: {student: [grade_ids that must fail]}} under default (CPU-only) grading.

    The files' top-level lists; a table such as [fakegpu] holds expectations on a device instead.
    """
    return {assignment: {student: failing for student, failing in table.items() if isinstance(failing, list)}
            for assignment, table in _expected_files().items()}


def expected_failures_on(kind: str) -> dict[str, dict[str, list[str]]]:
    """{assignment: {student: [grade_ids that must fail]}} when the default grader runs on a machine with
    device `kind` (e.g. "cuda"): the top-level lists, except where a [<kind>] table says otherwise."""
    merged = expected_failures()
    for assignment, per in expected_device_failures(kind).items():
        merged.setdefault(assignment, {}).update(per)
    return merged


def expected_device_failures(kind: str) -> dict[str, dict[str, list[str]]]:
    """{assignment: {student: [grade_ids that must fail on `kind`]}} from the [<kind>] tables.

    Device bugs pass on a CPU-only grader; these tables say what they must fail when the grader
    also visits `kind`. Only the students listed there are graded on that device.
    """
    return {assignment: table[kind] for assignment, table in _expected_files().items() if kind in table}


def main(argv: list[str]) -> int:
    for name in argv or list(assignments()):
        path = SUBMISSIONS / "reference" / name / f"{name}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(reference_submission(name), path)
        print(f"wrote {path.relative_to(SUBMISSIONS.parent.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
