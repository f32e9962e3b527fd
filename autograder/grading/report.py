"""The class-level outputs: grades.csv, results.csv, tampered.csv and the table and summary printed at
the end of a run.

Every CSV cell is written inert (csv_cells.py: a spreadsheet shows a student's "=HYPERLINK(...)" as
text), and read_results, the one reader of results.csv, reads back the original text.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from autograder.grading.csv_cells import read_rows, write_rows
from autograder.grading.hints import Mistake, likely_mistakes
from autograder.grading.results import CellResult, cell_scores
from dlkit.devices import KNOWN_KINDS

GRADE_COLUMNS = ["student_id", "assignment", "score", "max_score", "devices", "skipped_devices"]


@dataclass(frozen=True)
class Timing:
    """Where one submission's grading time went: its cells, and everything else (the overhead).

    Kept to the millisecond, as timings.csv writes them, so that what a run computes from its timings
    (the class report) is what a later rebuild from the file computes.
    """

    student_id: str
    assignment: str
    seconds: float            # wall time in the worker, from workspace to rows
    executing_seconds: float  # time the kernel spent running cells

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", round(self.seconds, 3))
        object.__setattr__(self, "executing_seconds", round(self.executing_seconds, 3))

    @property
    def overhead_seconds(self) -> float:
        return self.seconds - self.executing_seconds


def write_timings(out: Path, timings: list[Timing]) -> None:
    """OUT/timings.csv: a TA finds the slow submissions; `make bench` reads the overhead from it."""
    write_rows(out / "timings.csv", ["student_id", "assignment", "seconds", "executing_seconds", "overhead_seconds"],
               ([t.student_id, t.assignment, f"{t.seconds:.3f}", f"{t.executing_seconds:.3f}",
                 f"{t.overhead_seconds:.3f}"] for t in sorted(timings, key=lambda t: (t.student_id, t.assignment))))


def totals(rows: list[CellResult]) -> dict[tuple[str, str], tuple[float, float]]:
    """(score, max_score) per (student, assignment), each test cell counted once however many device rows it has."""
    sums: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0])
    for (student, assignment, _), (score, top) in cell_scores(rows).items():
        entry = sums[(student, assignment)]
        entry[0] += score
        entry[1] += top
    return {key: (score, top) for key, (score, top) in sorted(sums.items())}


def _joined(kinds: set[str]) -> str:
    """Device kinds in the kit's visiting order, joined with "+" ("cpu+cuda")."""
    order = {kind: i for i, kind in enumerate(KNOWN_KINDS)}
    return "+".join(sorted(kinds, key=lambda kind: order.get(kind, len(order))))


def coverage(rows: list[CellResult]) -> dict[tuple[str, str], tuple[str, str]]:
    """("cpu+cuda", "xla") per (student, assignment): the devices tests ran on, and those some test did not run on.

    Grading always runs on the CPU, so "cpu" is covered even by a notebook whose tests check no device.
    A kind in both lists ran for some tests only (e.g. a test that cannot run on the simulated GPU).
    """
    ran: dict[tuple[str, str], set[str]] = defaultdict(lambda: {"cpu"})
    skipped: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in rows:
        key = (r.student_id, r.assignment)
        if r.device and r.status == "skipped":
            skipped[key].add(r.device)
        else:
            ran[key].add(r.device or "cpu")
    return {key: (_joined(ran[key]), _joined(skipped[key])) for key in ran}


def in_csv_order(rows: list[CellResult]) -> list[CellResult]:
    """`rows` in results.csv's order: by student and assignment, each submission's rows as graded."""
    return sorted(rows, key=lambda r: (r.student_id, r.assignment))


def write_csvs(out: Path, rows: list[CellResult]) -> None:
    """Write OUT/results.csv (one row per test cell and device) and OUT/grades.csv (one per submission)."""
    out.mkdir(parents=True, exist_ok=True)
    columns = CellResult.columns()
    write_rows(out / "results.csv", columns, ([r.as_row()[c] for c in columns] for r in in_csv_order(rows)))
    covered = coverage(rows)
    write_rows(out / "grades.csv", GRADE_COLUMNS,
               ([student, assignment, f"{score:g}", f"{top:g}", *covered[(student, assignment)]]
                for (student, assignment), (score, top) in totals(rows).items()))
    write_mistakes(out, rows)


def read_results(out: Path) -> list[CellResult]:
    """The rows of OUT/results.csv as write_csvs meant them (its cells' original text), written by any version
    of the grader (those before messages were capped included)."""
    return [CellResult(r["student_id"], r["assignment"], r["grade_id"], float(r["score"]),
                       float(r["max_score"]), r["status"], r["message"], r.get("device") or "")
            for r in read_rows(out / "results.csv")]


def failing_tests(rows: list[dict[str, str]]) -> dict[tuple[str, str], set[str]]:
    """{(student, assignment): test cells with a row (of any device) neither passed nor skipped}, from the rows of
    a results.csv (read_rows); every submission with a row is a key, with no failing test an empty set."""
    failing: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        tests = failing.setdefault((r["student_id"], r["assignment"]), set())
        if r["status"] not in ("passed", "skipped"):
            tests.add(r["grade_id"])
    return failing


def tampered_rows(rows: list[CellResult]) -> list[CellResult]:
    """The rows voided for tampering, one per test cell (device rows repeat the cell's verdict)."""
    seen = {}
    for r in rows:
        if r.status == "tampered":
            seen.setdefault((r.student_id, r.assignment, r.grade_id), r)
    return [seen[key] for key in sorted(seen)]


def mistakes_found(rows: list[CellResult]) -> list[tuple[str, str, Mistake]]:
    """(student, assignment, known mistake) for every submission whose failures match one (hints.py)."""
    by_submission: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
    for r in rows:
        by_submission[(r.student_id, r.assignment)].append(r)
    return [(student, assignment, m) for (student, assignment), found in sorted(by_submission.items())
            for m in likely_mistakes(found)]


def write_mistakes(out: Path, rows: list[CellResult]) -> Path:
    """OUT/mistakes.csv: each submission's likely mistakes (student, assignment, exercise, mistake, hint)."""
    path = out / "mistakes.csv"
    write_rows(path, ["student_id", "assignment", "exercise", "mistake", "hint"],
               ([student, assignment, m.exercise, m.id, m.hint] for student, assignment, m in mistakes_found(rows)))
    return path


def write_tampered(out: Path, rows: list[CellResult]) -> Path | None:
    """OUT/tampered.csv: student, assignment, test and what changed, for the TA; None (and no file) if nothing was."""
    voided = tampered_rows(rows)
    path = out / "tampered.csv"
    path.unlink(missing_ok=True)  # a resumed run must not keep a stale list
    if not voided:
        return None
    write_rows(path, ["student_id", "assignment", "grade_id", "message"],
               ([r.student_id, r.assignment, r.grade_id, r.message] for r in voided))
    return path


def tampered_summary(rows: list[CellResult]) -> str:
    """The lines printed for the TA at the end of grading: each submission with tests voided for tampering."""
    voided = tampered_rows(rows)
    if not voided:
        return ""
    by_submission: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
    for r in voided:
        by_submission[(r.student_id, r.assignment)].append(r)
    lines = [f"TAMPERING: {len(voided)} tests of {len(by_submission)} submissions were voided (0 points); "
             "read their notebooks in autograded/:"]
    for (student, assignment), found in by_submission.items():
        lines.append(f"  {student}/{assignment}: {', '.join(r.grade_id for r in found)}: {found[0].message}")
    return "\n".join(lines)


def grade_table(rows: list[CellResult]) -> str:
    """A plain-text table: one line per student, one column per assignment, "score/max"."""
    table = totals(rows)
    students = sorted({s for s, _ in table})
    assignments = sorted({a for _, a in table})
    width = max([len("student")] + [len(s) for s in students])
    cols = [max(len(a), 9) for a in assignments]
    lines = ["  ".join(["student".ljust(width)] + [a.rjust(w) for a, w in zip(assignments, cols)])]
    for student in students:
        cells = []
        for assignment, w in zip(assignments, cols):
            score = table.get((student, assignment))
            cells.append((f"{score[0]:g}/{score[1]:g}" if score else "-").rjust(w))
        lines.append("  ".join([student.ljust(width)] + cells))
    return "\n".join(lines)
