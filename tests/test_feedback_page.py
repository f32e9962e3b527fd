"""The feedback page (feedback.py, from templates/feedback.html.j2): what a student sees of each test,
with everything from the submission escaped, and nothing else."""

from __future__ import annotations

from autograder.grading.feedback import render
from autograder.grading.results import CellResult


def row(grade_id: str, score: float, status: str, message: str = "", device: str = "") -> CellResult:
    return CellResult(student_id="s<1>", assignment="01_tensors", grade_id=grade_id, score=score, max_score=2,
                      status=status, message=message, device=device)


def test_page_lists_each_test_and_escapes_what_the_submission_wrote():
    hostile = "</code><script>alert('x')</script> & \"quoted\""
    page = render("s<1>", "01_tensors", [row("test_a", 2, "passed"),
                                         row("test_b", 0, "failed", hostile, device="cuda"),
                                         row("test_b", 0, "passed", device="cpu")])
    assert "<script>" not in page and "&lt;/code&gt;&lt;script&gt;alert(" in page
    assert "Student <b>s&lt;1&gt;</b>: <b>2 / 4</b> points." in page, "a test with device rows counts once"
    assert "test_b on cuda" in page and "test_b on cpu" in page
    assert page.count("<tr>") == 4 and "voided" not in page


def test_a_tampered_test_says_why_it_scores_zero():
    page = render("s", "01_tensors", [row("test_a", 0, "tampered", "numpy.random.default_rng was replaced")])
    assert "Some tests were voided" in page and "class='tampered'" in page
    assert "numpy.random.default_rng was replaced" in page
