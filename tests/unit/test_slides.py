"""Lecture slides: the committed cuts follow the rules (tests/pipeline/test_slides.py builds a deck)."""

from __future__ import annotations

import nbformat
import pytest

from autograder.authoring.slides import mark_slides
from autograder.course import assignments


@pytest.mark.parametrize("name", list(assignments()))
def test_committed_slide_cuts_follow_the_rules(name):
    nb = nbformat.read(assignments()[name], as_version=4)
    assert not mark_slides(nb), f"{name}: slide cuts are stale; run `python -m autograder.authoring.slides --mark`"
