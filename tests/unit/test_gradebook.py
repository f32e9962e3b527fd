"""The class gradebook: written twice, each submission is there once, and a TA's manual score survives."""

from __future__ import annotations

from nbgrader.api import Gradebook

from autograder.grading.gradebook import write_class_gradebook
from autograder.grading.results import CellResult, autograded_cells
from autograder.paths import BUILD


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


def test_a_new_gradebook_gets_nbgraders_schema_and_version_without_running_alembic(release, tmp_path, monkeypatch):
    """create_schema stamps the release gradebook's alembic version (nbgrader would run the `alembic`
    command for it: 4.6 s); the tables are nbgrader's own, and nbgrader opens the result as its own."""
    import nbgrader.api
    from sqlalchemy import create_engine, inspect, text

    from autograder.grading.gradebook import create_schema

    def no_alembic():
        raise AssertionError("nbgrader ran the alembic command")

    monkeypatch.setattr(nbgrader.api, "get_alembic_version", no_alembic)
    url = f"sqlite:///{tmp_path / 'class.db'}"
    create_schema(url, BUILD / "gradebook.db")

    def schema(db_url: str) -> tuple[set[str], str]:
        engine = create_engine(db_url)
        with engine.connect() as db:
            version = db.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        tables = set(inspect(engine).get_table_names())
        engine.dispose()
        return tables, version

    assert schema(url) == schema(f"sqlite:///{BUILD / 'gradebook.db'}")
    write_class_gradebook(url, rows_for("ada", set()))
    with Gradebook(url) as gb:
        assert [s.student.id for s in gb.assignment_submissions("01_tensors")] == ["ada"]
        assert [a.name for a in gb.assignments] == ["01_tensors"], "only what the run graded is defined"


def test_a_run_writes_each_submission_as_it_arrives(release, tmp_path):
    """class_gradebook keeps one gradebook open for a run: each write adds its submissions, a later one replaces."""
    from autograder.grading.gradebook import class_gradebook

    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with class_gradebook(url) as write:
        write(rows_for("ada", {"test_matmul_flops"}))
        with Gradebook(url) as gb:  # visible to a TA while the run goes on
            assert [s.student.id for s in gb.assignment_submissions("01_tensors")] == ["ada"]
        write(rows_for("bo", set()))
        write(rows_for("ada", set()))
    with Gradebook(url) as gb:
        assert {s.student.id: s.score for s in gb.assignment_submissions("01_tensors")} == {"ada": 12, "bo": 12}
