"""Turn a graded workspace into one row per test cell: score, status and a message for the student.

Scores come from the gradebook nbgrader wrote; the status and message come from the error
output of the test cell in the autograded notebook. Only the exception's name and message are
kept, never the traceback, which would quote hidden test source.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry

from .autograde import Workspace
from .preprocessors import KERNEL_DIED, NOT_RUN, NOTEBOOK_TIMEOUT

STATUSES = ("passed", "failed", "error", "timeout")
TIMEOUT_ERRORS = {"CellTimeoutError", "TimeoutError"}


@dataclass(frozen=True)
class CellResult:
    """One row of results.csv."""

    student_id: str
    assignment: str
    grade_id: str
    score: float
    max_score: float
    status: str
    message: str

    @classmethod
    def columns(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    def as_row(self) -> dict:
        return asdict(self)


def autograded_cells(notebook: Path) -> list[tuple[str, float]]:
    """(grade_id, points) of each autograded test cell of a notebook, in notebook order."""
    nb = nbformat.read(notebook, as_version=4)
    cells = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            cells.append((meta["grade_id"], float(meta.get("points", 0))))
    return cells


def _error_outputs(notebook: Path) -> dict[str, dict]:
    """The error output that explains each failed graded cell, by grade_id.

    A timeout wins over the KeyboardInterrupt that the interrupt it triggered raised.
    """
    errors = {}
    for cell in nbformat.read(notebook, as_version=4).cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        found = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if grade_id and found:
            errors[grade_id] = next((o for o in found if o.get("ename") in TIMEOUT_ERRORS), found[0])
    return errors


def describe_error(output: dict) -> tuple[str, str]:
    """(status, message) for a test cell's error output."""
    name, value = output.get("ename", "Error"), str(output.get("evalue", "")).strip()
    if name == NOTEBOOK_TIMEOUT:
        return "timeout", value
    if name in TIMEOUT_ERRORS:
        return "timeout", f"the cell {value}" if value else "the cell ran past the time limit"
    if name in (NOT_RUN, KERNEL_DIED):
        return "error", value
    if name == "AssertionError":
        return "failed", value or "a check failed (the test gave no message)"
    if name == "NotImplementedError":
        return "error", "NotImplementedError: the exercise still raises the stub's NotImplementedError"
    return "error", f"{name}: {value}" if value else name


def collect(workspace: Workspace, source: Path, success: bool, log: str) -> list[CellResult]:
    """Rows for every test cell of the submission graded in `workspace`."""
    cells = autograded_cells(source)
    student, assignment = workspace.student, workspace.assignment
    if not success:
        reason = last_error_line(log)
        return [CellResult(student, assignment, gid, 0.0, pts, "error", f"grading failed: {reason}")
                for gid, pts in cells]
    errors = _error_outputs(workspace.autograded_notebook)
    rows = []
    with Gradebook(f"sqlite:///{workspace.gradebook}") as gb:
        for grade_id, points in cells:
            try:
                score = gb.find_grade(grade_id, assignment, assignment, student).score or 0.0
            except MissingEntry:
                rows.append(CellResult(student, assignment, grade_id, 0.0, points, "error",
                                       "test cell missing from the graded notebook"))
                continue
            if grade_id in errors:
                status, message = describe_error(errors[grade_id])
            elif score >= points:
                status, message = "passed", ""
            else:
                status, message = "failed", f"scored {score:g} of {points:g}"
            rows.append(CellResult(student, assignment, grade_id, float(score), points, status, message))
    return rows


def execution_seconds(notebook: Path) -> float:
    """Seconds the kernel spent running the notebook's cells, from the timings nbclient records in each cell."""
    from datetime import datetime

    total = 0.0
    for cell in nbformat.read(notebook, as_version=4).cells:
        stamps = cell.get("metadata", {}).get("execution", {})
        start, end = stamps.get("iopub.execute_input"), stamps.get("shell.execute_reply")
        if start and end:
            total += (datetime.fromisoformat(end.replace("Z", "+00:00"))
                      - datetime.fromisoformat(start.replace("Z", "+00:00"))).total_seconds()
    return total


def last_error_line(log: str) -> str:
    """The most telling line of an nbgrader log: its last error, else its last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("[ERROR]") or "Error" in line:
            return line.removeprefix("[ERROR]").strip()
    return lines[-1] if lines else "no log"
