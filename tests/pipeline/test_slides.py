"""A lecture deck, built by running its notebook top to bottom: solutions (without nbgrader's markers) and
plots, but no hidden test. The deck comes from conftest.py's `lecture_decks`; test_browser.py measures it."""

from __future__ import annotations

import html
import re

import nbformat
import pytest

from autograder.authoring.samples import solution_sources
from autograder.course import assignments

pytestmark = pytest.mark.pipeline


def visible_text(deck: str) -> str:
    """The deck's text as a reader sees it: tags (syntax highlighting) removed, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", deck))


def test_deck_has_slides_plots_and_clean_solutions_but_no_hidden_tests(lecture_decks):
    name = "01_tensors"
    deck_path = lecture_decks[name]
    deck = deck_path.read_text(encoding="utf-8")
    assert deck.count("<section") >= 6, "each section of the notebook should be a slide"
    assert "data:image/png;base64," in deck, "the measured plots should be embedded"
    text = visible_text(deck)
    for grade_id, solution in solution_sources(assignments()[name]).items():
        assert solution.splitlines()[-1].strip() in text, f"solution of {grade_id} missing from the deck"
    assert "HIDDEN TESTS" not in text and "Traceback" not in text
    assert "BEGIN SOLUTION" not in text and "END SOLUTION" not in text, "solutions show as clean code"
    assert "widget-view" not in deck, "progress bars belong to live runs, not to slides"
    lecture_copy = nbformat.read(deck_path.parent / f"{name}.ipynb", as_version=4)
    assert any(cell.get("outputs") for cell in lecture_copy.cells), "the lecture copy keeps its outputs"
