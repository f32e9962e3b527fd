"""Turn a graded workspace into one row per test cell and device: score, status and a message for the student.

Scores come from the gradebook nbgrader wrote; the status and message come from the error
output of the test cell in the autograded notebook. Only the exception's name and message are
kept, never the traceback, which would quote hidden test source.

A test cell that checks through `dlkit.check_on_devices` sent one marker per device kind on the
marker channel, which GuardedExecute recorded in the cell's metadata (markers.py); such a cell gets
one row per device (column `device`), a cell without markers one row with device "". The score
stays the cell's: nbgrader grades a test cell all-or-nothing, so each of its device rows repeats the
cell's score and max_score, and totals count every cell once (`cell_scores`). Device markers are
sent from the kernel, where student code could send fake ones, so they are trusted only as far as
nbgrader's verdict allows: the last marker per device wins (the helper sends after the student's
code returned), only device kinds the grader asked for count, and a cell that nbgrader did not score
full never shows a device as passed unless another device's failure explains the lost points.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.utils import is_grade, is_solution

from autograder.course import grade_id_of
from autograder.grading.autograde import Workspace
from autograder.grading.markers import after_request, checked_nonce, device_markers
from autograder.grading.messages import MESSAGE_CHARS, message
from autograder.grading.preprocessors import KERNEL_DIED, NOT_RUN, NOTEBOOK_TIMEOUT
from dlkit.seeding import SEED_MARKER

STATUSES = ("passed", "failed", "error", "timeout", "skipped", "tampered")
#: The exception dlkit.integrity raises in a test cell that ran while the submission had tampered with what tests use.
TAMPERED = "TamperingDetected"
TIMEOUT_ERRORS = {"CellTimeoutError", "TimeoutError"}


@dataclass(frozen=True)
class CellResult:
    """One row of results.csv: a test cell on one device ("" for a cell that checks no device)."""

    student_id: str
    assignment: str
    grade_id: str
    score: float
    max_score: float
    status: str
    message: str
    device: str = ""  # last, so that rows stored by earlier versions (resume.py) still load

    def __post_init__(self) -> None:
        """Every row's message is capped and printable (messages.py), whichever way it came: kernel, intake,
        resume or a results.csv written before messages were capped."""
        object.__setattr__(self, "message", message(self.message))

    @classmethod
    def columns(cls) -> list[str]:
        """The CSV's column order: the device right after the test it qualifies."""
        names = [f.name for f in fields(cls) if f.name != "device"]
        return names[:3] + ["device"] + names[3:]

    def as_row(self) -> dict:
        return asdict(self)


def autograded_cells(notebook: Path) -> list[tuple[str, float]]:
    """(grade_id, points) of each autograded test cell of a notebook, in notebook order."""
    nb = nbformat.read(notebook, as_version=4)
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "code" and is_grade(cell) and not is_solution(cell):
            cells.append((grade_id_of(cell), float(cell.metadata.nbgrader.get("points", 0))))
    return cells


def _error_outputs(nb: nbformat.NotebookNode) -> dict[str, dict]:
    """The error output that explains each failed graded cell, by grade_id.

    A timeout wins over the KeyboardInterrupt that the interrupt it triggered raised.
    """
    errors = {}
    for cell in nb.cells:
        grade_id = grade_id_of(cell)
        found = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        if grade_id and found:
            errors[grade_id] = next((o for o in found if o.get("ename") in TIMEOUT_ERRORS), found[0])
    return errors


def _unchecked_cells(nb: nbformat.NotebookNode) -> set[str]:
    """Test cells that raised nothing yet have no integrity marker the grader accepted (markers.py).

    The grader ends each test cell with a check whose passing sends a marker for the cell's grade_id
    and the nonce only its source holds, signed with the checker's key. A cell that raised nothing
    without one did not run the grader's lines: the submission replaced how cells run or rewrote them.
    """
    unchecked = set()
    for cell in nb.cells:
        grade_id = grade_id_of(cell)
        request = after_request(cell.source) if grade_id and cell.cell_type == "code" else None
        if request is None or any(o.get("output_type") == "error" for o in cell.get("outputs", [])):
            continue
        if checked_nonce(cell) != request[1]:
            unchecked.add(grade_id)
    return unchecked


def _device_markers(nb: nbformat.NotebookNode, allowed: set[str]) -> dict[str, dict[str, dict]]:
    """The device markers the grader accepted in each graded cell, by grade_id, for the kinds the run grades on."""
    found = {}
    for cell in nb.cells:
        grade_id = grade_id_of(cell)
        if grade_id and (markers := device_markers(cell, allowed)):
            found[grade_id] = markers
    return found


def _seeds(nb: nbformat.NotebookNode) -> dict[str, int]:
    """The seed each graded cell's inputs were drawn with (the first seed line the cell printed), by grade_id."""
    seeds = {}
    for cell in nb.cells:
        grade_id = grade_id_of(cell)
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        for line in text.splitlines():
            if grade_id and line.startswith(SEED_MARKER) and line[len(SEED_MARKER):].strip().isdigit():
                seeds[grade_id] = int(line[len(SEED_MARKER):])
                break
    return seeds


def with_seed(row: CellResult, seeds: dict[str, int]) -> CellResult:
    """A failed row's message, followed by how to draw the same inputs again (kept however long the message)."""
    if row.status in ("passed", "skipped") or row.grade_id not in seeds:
        return row
    suffix = f" [inputs: dlkit.seed_everything({seeds[row.grade_id]})]"
    return replace(row, message=message(row.message, MESSAGE_CHARS - len(suffix)) + suffix)


def device_rows(cell: CellResult, markers: dict[str, dict]) -> list[CellResult]:
    """The rows of one graded test cell: one per device marker, else the cell's own row.

    nbgrader's verdict bounds what markers may claim: a device shows "passed" in a cell that lost
    its points only when another device's failure explains the loss.
    """
    if not markers:
        return [cell]
    explained = any(m["status"] == "failed" for m in markers.values())
    rows = []
    for kind, marker in markers.items():
        status, message = marker["status"], marker["message"]
        if status == "skipped":
            message = message or f"not run: this runtime has no {kind}"
        elif cell.status in ("passed", "tampered"):  # tampering voids the test on every device it ran on
            status, message = cell.status, cell.message
        elif (kind == "cpu" and status == "failed") or not explained:
            status = cell.status  # the cell's own exception came from the CPU (or is unexplained)
            message = cell.message if cell.message.startswith(f"on {kind}") else f"on {kind}: {cell.message}"
        elif status == "failed":
            message = message if message.startswith(f"on {kind}") else f"on {kind}: {message}"
        rows.append(replace(cell, device=kind, status=status, message=message))
    return rows


def cell_scores(rows: list[CellResult]) -> dict[tuple[str, str, str], tuple[float, float]]:
    """(score, max_score) per (student, assignment, grade_id): each test cell once, however many device rows."""
    return {(r.student_id, r.assignment, r.grade_id): (r.score, r.max_score) for r in rows}


def describe_error(output: dict) -> tuple[str, str]:
    """(status, message) for a test cell's error output."""
    name, value = output.get("ename", "Error"), str(output.get("evalue", "")).strip()
    if name == NOTEBOOK_TIMEOUT:
        return "timeout", value
    if name in TIMEOUT_ERRORS:
        return "timeout", f"the cell {value}" if value else "the cell ran past the time limit"
    if name in (NOT_RUN, KERNEL_DIED):
        return "error", value
    if name == TAMPERED:
        return "tampered", f"tampered: {value}"
    if name == "AssertionError":
        return "failed", value or "a check failed (the test gave no message)"
    if name == "NotImplementedError":
        return "error", "NotImplementedError: the exercise still raises the stub's NotImplementedError"
    return "error", f"{name}: {value}" if value else name


_FRAME = re.compile(r'^\s*File "[^"]*", line \d+, in .*$')


def without_stack_frames(message: str) -> str:
    """A failure message without the stack frames some libraries put into their errors.

    TensorFlow's graph errors list where each node was defined ("Detected at node ... defined at
    (most recent call last): File ..., line ..., in check_step") and AutoGraph's quote the frames
    "in user code:" with their source lines: frames of the hidden test, and the grader's own paths.
    The frame lines and the source line under each go; the error's own sentences stay.
    """
    kept: list[str] = []
    skip_source = False
    for line in message.splitlines():
        if _FRAME.match(line):
            skip_source = True
            continue
        if skip_source and line.startswith(" ") and line.strip():
            continue  # the frame's source line, and Python's ^^^^ markers under it
        skip_source = False
        if line.strip() != "Traceback (most recent call last):":
            kept.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def collect(workspace: Workspace, source: Path, success: bool, log: str, devices: Iterable[str]) -> list[CellResult]:
    """Rows for every test cell of the submission graded in `workspace` on the kinds `devices`."""
    cells = autograded_cells(source)
    student, assignment = workspace.student, workspace.assignment
    if not success:
        reason = last_error_line(log)
        return [CellResult(student, assignment, gid, 0.0, pts, "error", f"grading failed: {reason}")
                for gid, pts in cells]
    graded = nbformat.read(workspace.autograded_notebook, as_version=4)  # read once: executed notebooks are large
    errors = _error_outputs(graded)
    unchecked = _unchecked_cells(graded)
    markers = _device_markers(graded, set(devices))
    seeds = _seeds(graded)
    rows = []
    with Gradebook(f"sqlite:///{workspace.gradebook}") as gb:
        for grade_id, points in cells:
            try:
                score = gb.find_grade(grade_id, assignment, assignment, student).score or 0.0
            except MissingEntry:
                rows.append(CellResult(student, assignment, grade_id, 0.0, points, "error",
                                       "test cell missing from the graded notebook"))
                continue
            if grade_id in unchecked:
                score, status, message = 0.0, "tampered", ("tampered: the grader's integrity check did not run "
                                                           "in this test (cells were rewritten or not run)")
            elif grade_id in errors:
                status, message = describe_error(errors[grade_id])
            elif score >= points:
                status, message = "passed", ""
            else:
                status, message = "failed", f"scored {score:g} of {points:g}"
            cell = CellResult(student, assignment, grade_id, float(score), points, status, message)
            rows.extend(with_seed(replace(row, message=without_stack_frames(row.message)), seeds)
                        for row in device_rows(cell, markers.get(grade_id, {})))
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
