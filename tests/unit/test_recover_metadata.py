"""A notebook that lost its grading metadata is graded exactly, or refused with what to do (recover.py).

Unit tests rebuild stripped copies of every reference submission against the real release
(build/release, built once per session); tests/pipeline/test_recover_metadata.py grades such a
notebook, and a symlinked one, through `python -m autograder.grade`.
"""

from __future__ import annotations

import copy

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.authoring.samples import SUBMISSIONS, reference_submission
from autograder.course import assignments
from autograder.grading.recover import ADVICE, RecoveryError, rebuild
from tests.conftest import stripped

ALL = list(assignments())


@pytest.fixture(scope="module")
def built(release):
    """(release, instructor source) notebooks of each assignment."""
    return {name: (nbformat.read(path, as_version=4),
                   nbformat.read(release[name].parents[2] / "source" / name / f"{name}.ipynb", as_version=4))
            for name, path in release.items()}


def grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def is_solution(cell) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


def solutions(nb) -> dict[str, str]:
    return {grade_id(c): c.source for c in nb.cells if is_solution(c)}


def reference(name):
    return nbformat.read(SUBMISSIONS / "reference" / name / f"{name}.ipynb", as_version=4)


def without_extras(nb) -> list:
    return [c for c in nb.cells if not c.get("id", "").startswith("student-extra-")]


def assert_release_with_answers(rebuilt, release, answers):
    """Every release cell in release order, with its metadata; solution sources are `answers`, others the release's."""
    cells = without_extras(rebuilt)
    assert [c.get("id") for c in cells] == [c.get("id") for c in release.cells]
    for got, want in zip(cells, release.cells):
        assert got.metadata == want.metadata
        assert got.source == (answers[grade_id(want)] if is_solution(want) else want.source)


def next_to_an_answer(nb, i: int) -> bool:
    """Whether the cell at `i`, with the extras around it, sits right before or right after a solution cell."""
    is_extra = [c.get("id", "").startswith("student-extra-") for c in nb.cells]
    after, before = i, i
    while after < len(nb.cells) and is_extra[after]:
        after += 1
    while before >= 0 and is_extra[before]:
        before -= 1
    return (after < len(nb.cells) and is_solution(nb.cells[after])) or (before >= 0 and is_solution(nb.cells[before]))


def solution_positions(nb) -> dict[str, int]:
    return {grade_id(c): i for i, c in enumerate(nb.cells) if is_solution(c)}


@pytest.mark.parametrize("name", ALL)
def test_an_intact_reference_is_left_alone(built, name):
    assert rebuild(reference(name), *built[name]) is None


@pytest.mark.parametrize("name", ALL)
def test_a_stripped_release_reference_is_rebuilt_into_the_reference(built, name):
    """The reference as the current release makes it, every cell stripped: exactly the release with its answers."""
    ref = reference_submission(name)
    rebuilt = rebuild(stripped(ref), *built[name])
    assert_release_with_answers(rebuilt, built[name][0], solutions(ref))
    assert len(rebuilt.cells) == len(built[name][0].cells)  # no cell taken for the student's own
    nbformat.validate(rebuilt)


@pytest.mark.parametrize("name", ALL)
def test_each_stored_reference_stripped_gets_its_answers_and_the_release(built, name):
    """The stored samples predate some release edits: lecture cells that differ are kept as the student's extras."""
    ref = reference(name)
    release, _ = built[name]
    rebuilt = rebuild(stripped(ref), *built[name])
    assert solutions(rebuilt) == solutions(ref)
    assert_release_with_answers(rebuilt, release, solutions(ref))
    in_release = {c.source.strip() for c in release.cells}
    edited = [c.source for c in ref.cells if c.cell_type == "code" and not is_solution(c)
              and c.source.strip() not in in_release]
    extras = [i for i, c in enumerate(rebuilt.cells) if c.get("id", "").startswith("student-extra-")]
    assert [rebuilt.cells[i].source for i in extras] == edited
    for i in extras:  # each one right before an answer, or right after the last: never among the release's setup
        assert next_to_an_answer(rebuilt, i)
        assert "nbgrader" not in rebuilt.cells[i].metadata


def shuffled_partial(name):
    """Answers pasted in reverse order into a fresh notebook, half of them still with metadata, tests left out,
    a helper the first answer calls written just before it, and scratch work at the end."""
    ref = reference_submission(name)
    answers = [c for c in ref.cells if is_solution(c)]
    cells = []
    for i, cell in enumerate(reversed(answers)):
        cell = copy.deepcopy(cell)
        if i % 2:
            cell.metadata.pop("nbgrader")
        cells.append(cell)
    cells.insert(len(cells) - 1, new_code_cell("def _my_helper():\n    return 1"))
    cells.append(new_code_cell("print('scratch')"))
    return new_notebook(cells=cells, metadata=ref.metadata)


@pytest.mark.parametrize("name", ALL)
def test_shuffled_partly_stripped_answers_are_put_back_in_order_with_their_helper(built, name):
    release, _ = built[name]
    student = shuffled_partial(name)
    rebuilt = rebuild(student, *built[name])
    assert_release_with_answers(rebuilt, release, solutions(reference_submission(name)))
    first = grade_id(next(c for c in release.cells if is_solution(c)))
    at = solution_positions(rebuilt)
    assert rebuilt.cells[at[first] - 1].source.startswith("def _my_helper")  # written before it: runs before it
    assert rebuilt.cells[at[first] + 1].source == "print('scratch')"  # after the last answer written: right after it


def test_only_the_answers_come_from_the_student(built):
    """An edited test, a fake graded cell, a cell above the setup: plain cells; tests and setup stay the release's."""
    release, _ = built["01_tensors"]
    student = stripped(reference_submission("01_tensors"))
    test = next(i for i, c in enumerate(release.cells) if grade_id(c) == "test_matmul_flops")
    student.cells[test].source = "pass  # the test, emptied"
    fake = new_code_cell("assert True")
    fake.metadata["nbgrader"] = {"grade": True, "grade_id": "test_free_points", "points": 100, "solution": False,
                                 "locked": True, "schema_version": 3}
    student.cells.insert(test, fake)
    student.cells.insert(0, new_code_cell("import builtins  # before everything"))
    rebuilt = rebuild(student, *built["01_tensors"])
    graded = [c for c in rebuilt.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded == [c for c in release.cells if c.metadata.get("nbgrader", {}).get("grade")]
    extras = [c for c in rebuilt.cells if c.get("id", "").startswith("student-extra-")]
    assert {c.source for c in extras} == {"pass  # the test, emptied", "assert True",
                                          "import builtins  # before everything"}
    assert all(c.metadata == {} for c in extras)
    early = next(i for i, c in enumerate(rebuilt.cells) if c.source.startswith("import builtins"))
    assert is_solution(rebuilt.cells[early + 1])  # moved to just before the first answer, after the setup
    assert rebuilt.cells[:early] == release.cells[:early]


def test_a_pasted_stub_with_the_answer_below_it_is_graded_by_the_answer(built):
    release, _ = built["01_tensors"]
    ref = reference_submission("01_tensors")
    student = stripped(ref)
    stub = next(c for c in release.cells if grade_id(c) == "conv2d_single")
    at = next(i for i, c in enumerate(student.cells) if c.source == solutions(ref)["conv2d_single"])
    student.cells.insert(at, new_code_cell(stub.source))
    assert solutions(rebuild(student, *built["01_tensors"])) == solutions(ref)


def test_an_answer_left_out_stays_the_release_stub(built):
    release, _ = built["01_tensors"]
    ref = reference_submission("01_tensors")
    student = stripped(ref)
    student.cells = [c for c in student.cells if c.source != solutions(ref)["maxpool2d"]]
    got = solutions(rebuild(student, *built["01_tensors"]))
    assert got["maxpool2d"] == solutions(release)["maxpool2d"]
    assert got["conv2d_single"] == solutions(ref)["conv2d_single"]


def test_an_answer_with_a_syntax_error_is_placed_as_written(built):
    ref = reference_submission("01_tensors")
    student = stripped(ref)
    broken = "def to_numpy(t):\n    return t.numpy(\n"
    next(c for c in student.cells if c.source == solutions(ref)["to_numpy"]).source = broken
    assert solutions(rebuild(student, *built["01_tensors"]))["to_numpy"] == broken


def refusal(built, student) -> str:
    with pytest.raises(RecoveryError) as err:
        rebuild(student, *built["01_tensors"])
    message = str(err.value)
    assert message.startswith("this notebook has lost its grading metadata (cell ids)") and message.endswith(ADVICE)
    return message


def test_two_cells_answering_the_same_exercise_are_refused(built):
    student = stripped(reference_submission("01_tensors"))
    student.cells.append(new_code_cell("def conv2d_single(x, w):\n    return x  # second thoughts"))
    assert "2 cells answer conv2d_single" in refusal(built, student)


def test_one_cell_answering_two_exercises_is_refused(built):
    ref = reference_submission("01_tensors")
    student = stripped(ref)
    merged = solutions(ref)["conv2d_single"] + "\n\n" + solutions(ref)["maxpool2d"]
    student.cells = [c for c in student.cells if c.source != solutions(ref)["maxpool2d"]]
    next(c for c in student.cells if c.source == solutions(ref)["conv2d_single"]).source = merged
    assert "one cell defines the answers conv2d_single and maxpool2d together" in refusal(built, student)


def test_a_notebook_that_answers_nothing_recognisable_is_refused(built):
    student = new_notebook(cells=[new_code_cell("def my_conv(x, w):\n    return x")])
    assert "none of its cells defines" in refusal(built, student)


def test_an_answer_that_only_assigns_is_recognised_by_the_variable():
    """A "fill in this value" exercise defines no function: the variable it assigns identifies it."""
    def cell(source, grade_id=None, **flags):
        c = new_code_cell(source)
        if grade_id:
            c.metadata["nbgrader"] = {"grade_id": grade_id, "schema_version": 3, "grade": False, "locked": False,
                                      "solution": False, **flags}
        return c
    source = new_notebook(cells=[cell("learning_rate = 0.1  ### BEGIN SOLUTION", "lr", solution=True),
                                 cell("assert learning_rate < 1", "test_lr", grade=True, locked=True, points=1)])
    release = copy.deepcopy(source)
    release.cells[0].source = "learning_rate = None  # YOUR CODE HERE"
    student = new_notebook(cells=[new_code_cell("steps = 10"), new_code_cell("learning_rate = 0.05")])
    rebuilt = rebuild(student, release, source)
    assert [c.source for c in rebuilt.cells] == ["steps = 10", "learning_rate = 0.05", "assert learning_rate < 1"]
