"""grading/feedback.py: the student's page, built from result rows only.

Each test counts once towards the total however many device rows it has, a voided test is
explained, and whatever a row carries (names, messages written by student code) is escaped.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from autograder.grading.feedback import render, write_feedback
from autograder.grading.results import CellResult, collect

from .notebooks import error, graded_cell, graded_workspace, notebook


def row(grade_id: str, score: float, max_score: float, status: str, message: str = "", device: str = "") -> CellResult:
    return CellResult("ann", "01_tensors", grade_id, score, max_score, status, message, device)


class Cells(HTMLParser):
    """The text of each table row's cells."""

    def __init__(self):
        super().__init__()
        self.rows: list[list[str]] = []
        self.in_cell = False

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self.rows[-1].append("")
            self.in_cell = True

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.in_cell = False

    def handle_data(self, data):
        if self.in_cell:
            self.rows[-1][-1] += data


def table(page: str) -> list[list[str]]:
    parser = Cells()
    parser.feed(page)
    return parser.rows[1:]  # without the header


def total(page: str) -> str:
    return re.search(r"<b>([0-9.]+ / [0-9.]+)</b> points", page).group(1)


def test_a_test_with_device_rows_counts_once_in_the_total():
    page = render("ann", "01_tensors", [row("test_a", 0.0, 2.0, "passed", device="cpu"),
                                        row("test_a", 0.0, 2.0, "failed", "on fakegpu: wrong device", "fakegpu"),
                                        row("test_b", 3.0, 3.0, "passed")])
    assert total(page) == "3 / 5"
    assert [cells[:3] for cells in table(page)] == [["test_a on cpu", "0 / 2", "passed"],
                                                   ["test_a on fakegpu", "0 / 2", "failed"],
                                                   ["test_b", "3 / 3", "passed"]]


def test_a_voided_test_is_explained_and_a_clean_page_says_nothing_of_it():
    voided = row("test_a", 0.0, 1.0, "tampered", "tampered: numpy.allclose was replaced")
    tampered = render("ann", "01_tensors", [voided])
    clean = render("ann", "01_tensors", [row("test_a", 0.0, 1.0, "failed", "wrong shape")])
    assert "Some tests were voided" in tampered and "scores 0 whatever your answer" in tampered
    assert "voided" not in clean


def test_what_a_row_carries_is_escaped():
    script = "<script>alert('x')</script>"
    page = render("o'neil&co", "01_tensors", [row("test_a", 0.0, 1.0, "error", f"ValueError: {script}")])
    assert "<script>" not in page
    assert "&lt;script&gt;" in page and "o&#39;neil&amp;co" in page
    assert table(page)[0][3] == f"ValueError: {script}", "the student still reads their message as written"


def test_the_page_holds_no_test_source_even_when_the_traceback_quoted_it(tmp_path):
    """From a graded notebook whose error traceback quotes the hidden test, through results, to the page."""
    hidden = "assert secret_reference(x) == answer  # HIDDEN"
    source = notebook(graded_cell("test_a", hidden))
    autograded = notebook(graded_cell("test_a", hidden, outputs=[
        error("AssertionError", "values differ", ["Traceback (most recent call last)", f"----> 1 {hidden}",
                                                  "AssertionError: values differ"])]))
    workspace, source_path = graded_workspace(tmp_path / "ws", "ann", "01_tensors", source, autograded, {"test_a": 0.0})
    path = write_feedback(tmp_path / "out", "ann", "01_tensors", collect(workspace, source_path, True, "", ["cpu"]))
    assert path == tmp_path / "out" / "feedback" / "ann" / "01_tensors" / "feedback.html"
    page = path.read_text(encoding="utf-8")
    assert "values differ" in page
    assert "secret_reference" not in page and "HIDDEN" not in page
