"""Find a class's submissions and vet each one before any kernel starts.

Layout: <submissions>/<student>/<assignment>/*.ipynb. Anything that cannot be graded (a folder
that is not a known assignment, no notebook, a file that is not a valid notebook) becomes a
Submission with a `problem`, so the TA sees it as an error row and the rest of the class is
still graded.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

# nbgrader uses student ids in paths and database keys.
_STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one assignment, or the reason it cannot be graded."""

    student: str
    assignment: str
    notebook: Path | None
    problem: str | None = None


def read_problem(path: Path) -> str | None:
    """Why `path` cannot be graded as a notebook, or None if nbformat reads and validates it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return f"{path.name} cannot be read: {err}"
    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        return f"{path.name} is not valid JSON (line {err.lineno}, column {err.colno}): was it saved completely?"
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as err:  # nbformat raises several types for a malformed notebook
        return f"{path.name} is not a valid Jupyter notebook: {str(err).splitlines()[0]}"
    return None


def pick_notebook(folder: Path, assignment: str) -> tuple[Path | None, str | None]:
    """The notebook to grade in a student's assignment folder: <assignment>.ipynb, or the only one."""
    notebooks = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    expected = folder / f"{assignment}.ipynb"
    if expected in notebooks:
        return expected, None
    if len(notebooks) == 1:
        return notebooks[0], None
    if not notebooks:
        return None, f"no .ipynb file in {folder.name}/"
    names = ", ".join(p.name for p in notebooks)
    return None, f"several notebooks ({names}) and none named {assignment}.ipynb: which one is the submission?"


def discover(root: Path, known: set[str]) -> list[Submission]:
    """Every <student>/<assignment> folder under `root`, vetted, sorted by student then assignment."""
    if not root.is_dir():
        raise FileNotFoundError(f"submissions folder {root} does not exist")
    found = []
    for student_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        student = student_dir.name
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
            assignment = folder.name
            if not _STUDENT_ID.match(student):
                found.append(Submission(student, assignment, None,
                                        f"student folder name {student!r} is not a usable student id"))
                continue
            if assignment not in known:
                found.append(Submission(student, assignment, None,
                                        f"{assignment!r} is not an assignment of this course "
                                        f"(known: {', '.join(sorted(known))})"))
                continue
            notebook, problem = pick_notebook(folder, assignment)
            if notebook is not None:
                problem = read_problem(notebook)
            found.append(Submission(student, assignment, notebook, problem))
    return found
