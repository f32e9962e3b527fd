"""The one way the tests run the grader: `python -m autograder.grade` as a TA runs it, in its own process.

Every pipeline test that grades goes through `run_grader` (or `start_grader` and `finish` when it
must act while the run goes on: interrupt it, or run two at once), so the command line, the
working directory and what a failed run shows are the same everywhere, and a test reads the
outcome from one `Graded`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from autograder.authoring.samples import SUBMISSIONS
from autograder.paths import REPO
from tests.conftest import read_csv


@dataclass
class Graded:
    """One finished grading run: its process, its output folder and the rows of its CSV files."""

    out: Path
    returncode: int
    stdout: str
    stderr: str
    results: list[dict] = field(default_factory=list)
    grades: list[dict] = field(default_factory=list)

    def rows(self, student: str, assignment: str = "01_tensors") -> dict[str, dict]:
        """{grade_id: row} of one submission; a test checked on several devices shows its worst device's row.

        Default grading visits every device kind the machine has (and the simulated accelerator where it
        has none): a test failed if any of its device rows failed; a skipped device is not a failure.
        """
        rank = {"passed": 0, "skipped": 1}
        found: dict[str, dict] = {}
        for r in self.results:
            if (r["student_id"], r["assignment"]) == (student, assignment):
                kept = found.get(r["grade_id"])
                if kept is None or rank.get(r["status"], 2) > rank.get(kept["status"], 2):
                    found[r["grade_id"]] = r
        return {gid: (dict(r, status="passed") if r["status"] == "skipped" else r) for gid, r in found.items()}

    def failed(self, student: str, assignment: str = "01_tensors") -> list[str]:
        """The tests one submission lost points on, sorted."""
        return sorted(gid for gid, r in self.rows(student, assignment).items() if r["status"] != "passed")

    def grade(self, student: str, assignment: str = "01_tensors") -> dict:
        return next(g for g in self.grades if (g["student_id"], g["assignment"]) == (student, assignment))

    def autograded(self, student: str, assignment: str = "01_tensors") -> Path:
        return self.out / "autograded" / student / assignment / f"{assignment}.ipynb"


def command(class_dir: Path, out: Path, *flags: str, workers: int) -> list[str]:
    return [sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--workers", str(workers), *flags]


def start_grader(class_dir: Path, out: Path, *flags: str, workers: int = 1,
                 env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start a grading run in a session (and process group) of its own, as a shell starts a command, and return
    at once; `finish` waits for it."""
    return subprocess.Popen(command(class_dir, out, *flags, workers=workers), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(proc: subprocess.Popen, out: Path, expect_status: int | None = 0, timeout: float = 900) -> Graded:
    """Wait for a run started by `start_grader`; check its exit status (None: any) and read what it wrote."""
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        raise AssertionError(f"grading ran past {timeout} s:\n{stdout[-3000:]}{stderr[-3000:]}") from None
    if expect_status is not None:
        assert proc.returncode == expect_status, f"exit status {proc.returncode}:\n{stdout[-3000:]}{stderr[-5000:]}"
    results, grades = (read_csv(out / name) if (out / name).exists() else [] for name in ("results.csv", "grades.csv"))
    return Graded(out, proc.returncode, stdout, stderr, results, grades)


def run_grader(class_dir: Path, out: Path, *flags: str, workers: int = 2, expect_status: int | None = 0,
               env: dict[str, str] | None = None, timeout: float = 900) -> Graded:
    """Grade `class_dir` into `out` with `flags` and wait for it."""
    return finish(start_grader(class_dir, out, *flags, workers=workers, env=env), out, expect_status, timeout)


def copy_samples(class_dir: Path, samples: Iterable[tuple[str, str] | tuple[str, str, str]]) -> Path:
    """Copy sample submissions into `class_dir`: (sample, assignment) or (sample, assignment, as_student)."""
    for sample, assignment, *student in samples:
        shutil.copytree(SUBMISSIONS / sample / assignment, class_dir / (student[0] if student else sample) / assignment)
    return class_dir
