"""The class gradebook: written twice, each submission is there once, and a TA's manual score survives."""

from __future__ import annotations

from nbgrader.api import Gradebook

from autograder.course import BUILD
from autograder.gradebook import write_class_gradebook
from autograder.results import CellResult, autograded_cells


def rows_for(student: str, failing: set[str]) -> list[CellResult]:
    cells = autograded_cells(BUILD / "source" / "01_tensors" / "01_tensors.ipynb")
    return [CellResult(student, "01_tensors", gid, 0.0 if gid in failing else pts, pts,
                       "failed" if gid in failing else "passed", "") for gid, pts in cells]


def test_rewriting_updates_in_place_and_keeps_manual_scores(release, tmp_path):
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    write_class_gradebook(url, rows_for("ada", {"test_matmul_flops"}) + rows_for("bo", set()))
    with Gradebook(url) as gb:
        assert {s.student.id: s.score for s in gb.assignment_submissions("01_tensors")} == {"ada": 11, "bo": 12}
        assert not any(g.needs_manual_grade for s in gb.assignment_submissions("01_tensors")
                       for nb in s.notebooks for g in nb.grades)
        gb.find_grade("test_peak_flops", "01_tensors", "01_tensors", "bo").manual_score = 0.5  # a TA's override
        gb.db.commit()

    write_class_gradebook(url, rows_for("ada", set()) + rows_for("bo", set()))  # a re-run: ada resubmitted
    with Gradebook(url) as gb:
        submissions = gb.assignment_submissions("01_tensors")
        assert len(submissions) == 2 and len(gb.students) == 2
        assert {s.student.id: s.score for s in submissions} == {"ada": 12, "bo": 11.5}
        kept = gb.find_grade("test_peak_flops", "01_tensors", "01_tensors", "bo")
        assert kept.manual_score == 0.5 and kept.needs_manual_grade
