"""grading/hints.py and autograder/hints/: feedback that names the likely mistake, matched by behaviour only.

The hint files must be sound (their exercises and tests exist, the corpus's labels name real mistakes),
must never quote a hidden test or a solution, and matching must follow the rules: every listed failure
with its pattern, every listed pass, the most specific mistake of an exercise, nothing for a submission
that passed. The feedback page and the class report show what matched.
"""

from __future__ import annotations

import re

import nbformat
import pytest
import tomllib
from nbgrader.utils import is_grade, is_solution

from autograder.course import assignments, grade_id_of
from autograder.grading.class_report import mistakes_table
from autograder.grading.feedback import render
from autograder.grading.hints import Mistake, likely_mistakes, mistakes
from autograder.grading.results import CellResult
from autograder.paths import CORPUS, HINTS

HINTED = sorted(path.stem for path in HINTS.glob("*.toml"))


def notebook_parts(assignment: str) -> tuple[set[str], set[str], list[str]]:
    """(solution grade_ids, test grade_ids, lines of solution code and hidden tests) of an instructor notebook."""
    nb = nbformat.read(assignments()[assignment], as_version=4)
    solutions, tests, secret = set(), set(), []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if is_solution(cell):
            solutions.add(grade_id_of(cell))
            secret += re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S)
        elif is_grade(cell):
            tests.add(grade_id_of(cell))
            secret += re.findall(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", cell.source, re.S)
    lines = [line.strip() for block in secret for line in block.splitlines() if len(line.strip()) >= 20]
    return solutions, tests, lines


@pytest.mark.parametrize("assignment", HINTED)
def test_every_mistake_names_an_exercise_and_tests_of_its_notebook(assignment):
    solutions, tests, _ = notebook_parts(assignment)
    found = mistakes(assignment)
    assert found, f"{assignment}: a hints file without mistakes"
    for m in found:
        assert m.exercise in solutions, f"{m.id}: no exercise {m.exercise} in {assignment}"
        assert set(m.fails) | set(m.passes) <= tests, f"{m.id}: tests {set(m.fails) | set(m.passes) - tests} unknown"
        assert len(m.hint) > 30, f"{m.id}: a hint says what is wrong and why, in a sentence"


@pytest.mark.parametrize("assignment", HINTED)
def test_no_hint_quotes_a_hidden_test_or_the_solution(assignment):
    _, _, secret = notebook_parts(assignment)
    for m in mistakes(assignment):
        quoted = [line for line in secret if line in m.hint]
        assert not quoted, f"{m.id} quotes the notebook's hidden tests or solution: {quoted}"


@pytest.mark.parametrize("assignment", HINTED)
def test_the_corpus_labels_name_known_mistakes(assignment):
    with open(CORPUS / f"{assignment}.toml", "rb") as f:
        labels = {raw["mistake"] for raw in tomllib.load(f).get("wrong", []) if "mistake" in raw}
    assert labels, f"{assignment}: no wrong answer of the corpus names its mistake"
    assert labels <= {m.id for m in mistakes(assignment)}


def rows(outcomes: dict[str, tuple[str, str]], student: str = "ann") -> list[CellResult]:
    return [CellResult(student, "02_backprop", test, 0.0 if status != "passed" else 1.0, 1.0, status, message)
            for test, (status, message) in outcomes.items()]


PASSED = ("passed", "")


def test_a_failure_matching_a_mistake_names_it_and_a_pass_names_nothing():
    stable = ("failed", "softmax_loss of scores (800, 0, -5) should be finite (about 0), got loss inf: subtract the "
                        "row maximum before exp")
    assert [m.id for m in likely_mistakes(rows({"test_softmax_stable": stable, "test_softmax_loss": PASSED}))] \
        == ["softmax_not_shifted"]
    assert likely_mistakes(rows({"test_softmax_stable": PASSED, "test_softmax_loss": PASSED})) == []
    other = ("failed", "softmax_loss has shape (3,), expected ()")
    assert likely_mistakes(rows({"test_softmax_stable": other})) == [], "the message must match, not just the test"


def test_a_required_pass_and_the_most_specific_mistake(tmp_path):
    (tmp_path / "02_backprop.toml").write_text('''
[[mistake]]
id = "broad"
exercise = "svm_loss"
hint = "a broad hint about the gradient of the hinge loss and its margins"
fails = { test_svm_grad = "" }

[[mistake]]
id = "narrow"
exercise = "svm_loss"
hint = "a narrow hint: only when the loss itself is right is the gradient's row count to blame"
fails = { test_svm_grad = "count" }
passes = ["test_svm_loss"]
''')
    mistakes.cache_clear()
    try:
        grad = ("failed", "each row's correct class gets minus that row's count")
        assert [m.id for m in likely_mistakes(rows({"test_svm_grad": grad, "test_svm_loss": PASSED}), tmp_path)] \
            == ["narrow"]
        assert [m.id for m in likely_mistakes(rows({"test_svm_grad": grad, "test_svm_loss": ("failed", "x")}),
                                              tmp_path)] == ["broad"]
    finally:
        mistakes.cache_clear()


def test_the_feedback_page_shows_the_hint_beside_the_failure_escaped():
    stable = ("failed", "should be finite <b>x</b>: subtract the row maximum before exp")
    page = render("ann", "02_backprop", rows({"test_softmax_stable": stable, "test_softmax_loss": PASSED}))
    assert page.count("Likely mistake:") == 1 and "subtract each row" in page
    assert "<b>x</b>" not in page, "messages stay escaped"
    assert "Likely mistake" not in render("ann", "02_backprop", rows({"test_softmax_loss": PASSED}))


def test_the_class_report_counts_students_per_mistake():
    stable = ("failed", "should be finite: subtract the row maximum before exp")
    class_rows = (rows({"test_softmax_stable": stable}, "ann") + rows({"test_softmax_stable": stable}, "bob")
                  + rows({"test_softmax_stable": PASSED}, "cy"))
    table = mistakes_table(class_rows)
    assert re.search(r"softmax_not_shifted</td><td class=\"\">[^<]*</td><td class=\"num\">2</td><td class=\"num\">67%",
                     table), table
    assert isinstance(mistakes("02_backprop")[0], Mistake)
