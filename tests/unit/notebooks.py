"""Tiny notebooks and graded workspaces for the unit tests, built in code.

A test cell here is what nbgrader marks one (`grade: true`, no solution); a graded workspace is
the layout autograder.grading.autograde.Workspace describes: a gradebook nbgrader's own API
filled in with each test cell's score, and the autograded notebook with the outputs a kernel
would have written. No kernel and no nbgrader run: results.collect reads exactly these files.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output
from nbgrader.api import Base, Gradebook
from sqlalchemy import create_engine
from sqlalchemy.exc import SAWarning

from autograder.grading.autograde import Workspace

KERNELSPEC = {"name": "python3", "display_name": "Python 3", "language": "python"}


def graded_cell(grade_id: str, source: str = "assert True", points: float = 1.0, outputs: list | None = None):
    """A locked, autograded test cell, as the instructor source has it."""
    cell = new_code_cell(source, outputs=outputs or [])
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": True, "grade_id": grade_id,
                                 "points": points, "schema_version": 3}
    return cell


def answer_cell(grade_id: str, source: str = "def f():\n    return 1"):
    """A student's answer cell."""
    cell = new_code_cell(source)
    cell.metadata["nbgrader"] = {"grade": False, "solution": True, "locked": False, "grade_id": grade_id,
                                 "schema_version": 3}
    return cell


def notebook(*cells) -> nbformat.NotebookNode:
    return new_notebook(cells=list(cells), metadata={"kernelspec": KERNELSPEC})


def error(ename: str, evalue: str = "", traceback: list[str] | None = None):
    return new_output("error", ename=ename, evalue=evalue, traceback=traceback or [f"{ename}: {evalue}"])


def stdout(text: str):
    return new_output("stream", name="stdout", text=text)


def graded_workspace(root: Path, student: str, assignment: str, source: nbformat.NotebookNode,
                     autograded: nbformat.NotebookNode, scores: dict[str, float]) -> tuple[Workspace, Path]:
    """(workspace, instructor source path): a gradebook recording `scores` by grade_id, and the autograded notebook.

    Test cells of `source` left out of `scores` are left out of the gradebook too, as a cell nbgrader never saw.
    """
    source_path = root / "source" / assignment / f"{assignment}.ipynb"
    source_path.parent.mkdir(parents=True)
    nbformat.write(source, source_path)
    workspace = Workspace(root, student, assignment)
    # Tables made here, so that Gradebook finds them and skips asking the `alembic` command for a schema
    # version (seconds, and a command on PATH); results.collect reads only the grades.
    engine = create_engine(f"sqlite:///{workspace.gradebook}")
    Base.metadata.create_all(bind=engine)
    engine.dispose()
    with Gradebook(f"sqlite:///{workspace.gradebook}") as gb:
        gb.add_assignment(assignment)
        gb.add_notebook(assignment, assignment)
        for cell in source.cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade") and meta["grade_id"] in scores:
                gb.add_grade_cell(meta["grade_id"], assignment, assignment, max_score=meta["points"],
                                  cell_type="code")
        gb.add_student(student)
        with warnings.catch_warnings():  # nbgrader's add_submission trips SQLAlchemy's autoflush warnings
            warnings.simplefilter("ignore", SAWarning)
            gb.add_submission(assignment, student)
        for grade_id, score in scores.items():
            gb.find_grade(grade_id, assignment, assignment, student).auto_score = score
        gb.db.commit()
    workspace.autograded_notebook.parent.mkdir(parents=True)
    nbformat.write(autograded, workspace.autograded_notebook)
    return workspace, source_path
