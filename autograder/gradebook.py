"""The class gradebook: every graded submission's scores in one nbgrader database.

Each submission is autograded in a workspace of its own (autograde.py), so grading workers
never share a SQLite file. When a run ends, the process that drove it writes every score into
the class gradebook in one pass (OUT/gradebook.db, or any SQLAlchemy URL nbgrader accepts, such
as PostgreSQL when runs on several machines share one gradebook). Writing a submission replaces
its earlier entry, so a resumed or repeated run never counts a submission twice.

OUT is then an nbgrader course directory (source/, submitted/, autograded/, gradebook.db), so
nbgrader's formgrader and `nbgrader export` work on it as on a class graded by hand.
"""

from __future__ import annotations

import random
import shutil
import time
from collections import defaultdict
from pathlib import Path

from nbgrader.api import Gradebook, InvalidEntry, MissingEntry
from sqlalchemy.exc import SQLAlchemyError

from .course import BUILD, nbgrader_config
from .intake import Submission
from .results import CellResult

_SOURCE_CELL_FIELDS = ("cell_type", "locked", "source", "checksum")


def class_db_url(out: Path) -> str:
    """The default class gradebook: a SQLite file in the output folder."""
    return f"sqlite:///{out / 'gradebook.db'}"


def copy_definitions(release_db: Path, gb: Gradebook, names: set[str]) -> None:
    """Copy the definitions of the assignments `names` (notebooks, test and solution cells) from the release gradebook."""
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
    """Replace the gradebook entry of one submission with the scores in `rows` (one per test cell)."""
    gb.update_or_create_student(student)
    try:
        gb.remove_submission(assignment, student)
    except MissingEntry:
        pass
    submission = gb.add_submission(assignment, student)
    scores = {r.grade_id: r.score for r in rows}
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            grade.auto_score = scores.get(grade.name, 0.0)
    gb.db.commit()


def write_class_gradebook(db_url: str, rows: list[CellResult], release_db: Path = BUILD / "gradebook.db",
                          attempts: int = 5) -> None:
    """Write every submission in `rows` into the gradebook at `db_url`, creating what it lacks.

    Several runs may write one database server at once (one per section, or per machine): when
    two create the same assignment or student at the same moment, the loser's transaction fails on
    a unique constraint, and it simply tries again, finding the row the other one made.
    """
    by_submission: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
    for r in rows:
        by_submission[(r.student_id, r.assignment)].append(r)
    course_id = nbgrader_config(release_db.parent).CourseDirectory.course_id  # a database server checks it exists
    for attempt in range(1, attempts + 1):
        try:
            with Gradebook(db_url, course_id=course_id) as gb:
                copy_definitions(release_db, gb, {assignment for _, assignment in by_submission})
                known = {a.name for a in gb.assignments}
                for (student, assignment), graded in sorted(by_submission.items()):
                    if assignment in known:  # an unknown assignment has nothing to record against
                        record(gb, student, assignment, graded)
            return
        except (InvalidEntry, SQLAlchemyError):
            if attempt == attempts:
                raise
            time.sleep(random.uniform(0.1, 0.5) * attempt)


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
