"""Notebooks that lost their grading metadata, graded with the compact class (tests/unit/test_recover_metadata.py
tests the rebuilding): a stripped reference gets full marks, an ambiguous one and a symlink get error rows."""

from __future__ import annotations

import pytest

from tests.pipeline.compact_class import FILTER

pytestmark = [pytest.mark.pipeline, pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the graded class")]


def test_a_stripped_reference_gets_full_marks_an_ambiguous_one_and_a_symlink_error_rows(graded):
    assert ("cannot grade recover_linked/01_tensors: 01_tensors.ipynb cannot be read: it is a symbolic link"
            in graded.stderr)
    assert "note: recover_stripped/01_tensors: it lost its grading metadata" in graded.stderr
    stripped = graded.grade("recover_stripped")
    assert (float(stripped["score"]), float(stripped["max_score"])) == (12.0, 12.0)
    assert float(graded.grade("recover_linked")["score"]) == 0.0
    linked = [row for row in graded.results if row["student_id"] == "recover_linked"]
    assert len(linked) == 10 and all(r["status"] == "error" and "symbolic link" in r["message"] for r in linked)
    refused = [row for row in graded.results if row["student_id"] == "recover_ambiguous"]
    assert len(refused) == 10 and all(r["status"] == "error" and "2 cells answer conv2d_single" in r["message"]
                                      for r in refused)
    assert "cannot grade recover_ambiguous/01_tensors: this notebook has lost its grading metadata" in graded.stderr
