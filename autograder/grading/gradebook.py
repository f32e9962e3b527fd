"""The class gradebook: every graded submission's scores in one nbgrader database.

Each submission is autograded in a workspace of its own (autograde.py), so grading workers
never share a SQLite file. The process that drives the run writes each submission's scores into
the class gradebook as they come back (OUT/gradebook.db, or any SQLAlchemy URL nbgrader accepts, such
as PostgreSQL when runs on several machines share one gradebook). Writing a submission replaces
its scores in place (keeping any a TA gave by hand), so a resumed or repeated run never counts a
submission twice.

OUT is then an nbgrader course directory (source/, submitted/, autograded/, gradebook.db), so
nbgrader's formgrader and `nbgrader export` work on it as on a class graded by hand.
"""

from __future__ import annotations

import random
import shutil
import time
import warnings
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from nbgrader.api import Base, Gradebook, InvalidEntry
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import SAWarning, SQLAlchemyError

from autograder.course import nbgrader_config
from autograder.grading.intake import Submission
from autograder.grading.results import CellResult
from autograder.paths import BUILD

_SOURCE_CELL_FIELDS = ("cell_type", "locked", "source", "checksum")


def class_db_url(out: Path) -> str:
    """The default class gradebook: a SQLite file in the output folder."""
    return f"sqlite:///{out / 'gradebook.db'}"


def create_schema(db_url: str, release_db: Path) -> None:
    """Create the tables of a new gradebook at `db_url`, stamped with the release gradebook's schema version.

    nbgrader's Gradebook does this itself for a database without tables, but learns the version
    by running the `alembic` command: 4.6 s measured, in every run that starts a class gradebook.
    The release gradebook, made by the same nbgrader, already records it.
    """
    engine, release = create_engine(db_url), create_engine(f"sqlite:///{release_db}")
    try:
        if inspect(engine).get_table_names():
            return
        with release.connect() as db:
            version = db.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        Base.metadata.create_all(bind=engine)
        with engine.begin() as db:
            db.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)"))
            db.execute(text("INSERT INTO alembic_version (version_num) VALUES (:v)"), {"v": version})
    finally:
        engine.dispose()
        release.dispose()


def copy_definitions(release_db: Path, gb: Gradebook, names: set[str]) -> None:
    """Copy the definitions of the assignments `names` (notebooks, test and solution cells) from the release
    gradebook."""
    with Gradebook(f"sqlite:///{release_db}") as release:
        for assignment in release.assignments:
            if assignment.name not in names:
                continue
            gb.update_or_create_assignment(assignment.name, course_id=assignment.course_id)
            for nb in assignment.notebooks:
                gb.update_or_create_notebook(nb.name, assignment.name)
                for cell in nb.grade_cells:
                    gb.update_or_create_grade_cell(cell.name, nb.name, assignment.name,
                                                   max_score=cell.max_score, cell_type=cell.cell_type)
                for cell in nb.solution_cells:
                    gb.update_or_create_solution_cell(cell.name, nb.name, assignment.name)
                for cell in nb.task_cells:
                    gb.update_or_create_task_cell(cell.name, nb.name, assignment.name,
                                                  max_score=cell.max_score, cell_type=cell.cell_type)
                for cell in nb.source_cells:
                    gb.update_or_create_source_cell(cell.name, nb.name, assignment.name,
                                                    **{f: getattr(cell, f) for f in _SOURCE_CELL_FIELDS})


def record(gb: Gradebook, student: str, assignment: str, rows: list[CellResult]) -> None:
    """Set the automatic scores of one submission from `rows` (one per test cell), creating it if new.

    As nbgrader's SaveAutoGrades does: a score a TA gave by hand is kept, and such a cell is
    flagged for review; every other cell needs no manual grading.
    """
    with warnings.catch_warnings():  # nbgrader's own session use makes SQLAlchemy warn; the rows are written
        warnings.simplefilter("ignore", SAWarning)
        gb.update_or_create_student(student)
        submission = gb.update_or_create_submission(assignment, student)
        scores = {r.grade_id: r.score for r in rows}
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                grade.auto_score = scores.get(grade.name, 0.0)
                grade.needs_manual_grade = grade.manual_score is not None
        gb.db.commit()


@contextmanager
def class_gradebook(db_url: str, release_db: Path = BUILD / "gradebook.db",
                    attempts: int = 5) -> Iterator[Callable[[list[CellResult]], None]]:
    """The class gradebook at `db_url`, open for one run: yields `write(rows)`, which records every
    submission in `rows` (creating the assignments, students and tables it lacks).

    A run writes each submission as its result comes back, while the workers grade the next ones,
    so the gradebook adds to the run only the write of its last submission (~0.15 s a submission
    into SQLite, measured). The database is opened at the first write, after the grading workers
    were forked: a SQLite connection must not cross a fork.

    Several runs may write one database server at once (one per section, or per machine): when
    two create the same assignment or student at the same moment, the loser's transaction fails on
    a unique constraint, and it simply tries again, finding the row the other one made.
    """
    course_id = nbgrader_config(release_db.parent).CourseDirectory.course_id  # a database server checks it exists
    opened: list[Gradebook] = []
    defined: set[str] = set()  # assignments whose definitions this run copied
    known: set[str] = set()    # assignments the gradebook has, as of the last copy

    def write(rows: list[CellResult]) -> None:
        by_submission: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
        for r in rows:
            by_submission[(r.student_id, r.assignment)].append(r)
        for attempt in range(1, attempts + 1):
            try:
                if not opened:
                    create_schema(db_url, release_db)
                    opened.append(stack.enter_context(Gradebook(db_url, course_id=course_id)))
                gb = opened[0]
                if new := {assignment for _, assignment in by_submission} - defined:
                    copy_definitions(release_db, gb, new)
                    defined.update(new)
                    known.update(a.name for a in gb.assignments)
                for (student, assignment), graded in sorted(by_submission.items()):
                    if assignment in known:  # an unknown assignment has nothing to record against
                        record(gb, student, assignment, graded)
                return
            except (InvalidEntry, SQLAlchemyError):
                if opened:
                    opened[0].db.rollback()
                if attempt == attempts:
                    raise
                time.sleep(random.uniform(0.1, 0.5) * attempt)

    with ExitStack() as stack:
        yield write


def write_class_gradebook(db_url: str, rows: list[CellResult], release_db: Path = BUILD / "gradebook.db",
                          attempts: int = 5) -> None:
    """Write every submission in `rows` into the gradebook at `db_url` at once (see class_gradebook)."""
    with class_gradebook(db_url, release_db, attempts) as write:
        write(rows)


def lay_out_course(out: Path, submissions: list[Submission], release_root: Path = BUILD) -> None:
    """Make OUT an nbgrader course directory: the sources and each submitted notebook beside autograded/."""
    for assignment in sorted({s.assignment for s in submissions}):
        source = release_root / "source" / assignment
        if source.is_dir():
            shutil.copytree(source, out / "source" / assignment, dirs_exist_ok=True)
    for s in submissions:
        if s.problem is None:
            target = out / "submitted" / s.student / s.assignment
            target.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(s.notebook, target / f"{s.assignment}.ipynb")
