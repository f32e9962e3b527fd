"""The sample submissions as a proof: each one loses exactly the points of its mistake, the blank release scores 0.

autograder/submissions/<student>/<assignment>/ holds the reference answers, one submission per
kind of mistake students really make (buggy_*), hostile ones (hostile_*: loops, bombs, tampering)
and correct-but-unusual ones; autograder/expected/<assignment>.toml lists the test cells each must
fail under default grading, every other test cell must pass. `make accuracy` grades them in the
same run as the held-out corpus (accuracy.py), so every hidden test is shown failing for the blank
release and for at least one plausible wrong answer, and passing for the reference.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from autograder.authoring.samples import expected_failures
from autograder.course import assignments
from autograder.grading.results import CellResult, autograded_cells
from autograder.paths import SUBMISSIONS

BLANK = "blank"  # the student name `python -m autograder.grade --with-blank` gives the untouched release


@dataclass(frozen=True)
class SampleVerdict:
    """Whether one graded sample (or blank release) came out as its expectations say."""

    student: str
    assignment: str
    agrees: bool
    what: str


def copy_samples(class_dir: Path, names: list[str]) -> list[tuple[str, str]]:
    """Copy every sample submission of the assignments `names` into class_dir; return (student, assignment) pairs."""
    copied = []
    for notebook in sorted(SUBMISSIONS.glob("*/*/*.ipynb")):
        student, assignment = notebook.parent.parent.name, notebook.parent.name
        if assignment in names:
            shutil.copytree(notebook.parent, class_dir / student / assignment, dirs_exist_ok=True)
            copied.append((student, assignment))
    return copied


def failed_tests(rows: list[CellResult], student: str, assignment: str) -> dict[str, CellResult]:
    """{grade_id: the row that failed} of one submission: a test failed if any of its device rows neither
    passed nor was skipped (default grading visits every device kind there is, fakegpu included)."""
    failed: dict[str, CellResult] = {}
    for r in rows:
        if (r.student_id, r.assignment) == (student, assignment) and r.status not in ("passed", "skipped"):
            failed.setdefault(r.grade_id, r)
    return failed


def judge_samples(rows: list[CellResult], graded: list[tuple[str, str]]) -> list[SampleVerdict]:
    """A verdict for every graded sample against autograder/expected, and for the blank release of each assignment."""
    by_submission: dict[tuple[str, str], list[CellResult]] = {}
    for r in rows:
        by_submission.setdefault((r.student_id, r.assignment), []).append(r)
    expected = expected_failures()
    verdicts = []
    for student, assignment in graded:
        mine = by_submission.get((student, assignment), [])
        cells = dict(autograded_cells(assignments()[assignment]))
        if student not in expected.get(assignment, {}):
            verdicts.append(SampleVerdict(student, assignment, False,
                                          f"not listed in autograder/expected/{assignment}.toml"))
            continue
        if {r.grade_id for r in mine} != set(cells):
            verdicts.append(SampleVerdict(student, assignment, False, "not one result per test cell (not graded?)"))
            continue
        want = set(expected[assignment][student])
        failed = failed_tests(mine, student, assignment)
        unexpected = {gid: failed[gid].message for gid in sorted(set(failed) - want)}
        missed = sorted(want - set(failed))
        misscored = sorted({r.grade_id for r in mine if r.score != (0.0 if r.grade_id in want else cells[r.grade_id])})
        problems = ([f"also failed {unexpected}"] if unexpected else []) + ([f"passed {missed}"] if missed else []) + (
            [f"scored wrongly on {misscored}"] if misscored else [])
        verdicts.append(SampleVerdict(student, assignment, not problems, "; ".join(problems) or "as expected"))
    for assignment in sorted({a for _, a in graded}):
        blank = by_submission.get((BLANK, assignment), [])
        scored = [r for r in blank if r.score > 0 or r.status == "passed" or not r.message]
        ok = bool(blank) and not scored
        verdicts.append(SampleVerdict(BLANK, assignment, ok, "0 points, a reason on every test" if ok else
                                      f"scored or said nothing on {sorted({r.grade_id for r in scored})}"
                                      if blank else "not graded"))
    return verdicts


def sample_table(verdicts: list[SampleVerdict]) -> str:
    """Per assignment: samples as expected, the blank release at 0; then every disagreement, as Markdown."""
    lines = ["| assignment | samples as expected | blank release scores 0 |", "|---|---|---|"]
    for assignment in sorted({v.assignment for v in verdicts}):
        samples = [v.agrees for v in verdicts if v.assignment == assignment and v.student != BLANK]
        blank = [v.agrees for v in verdicts if v.assignment == assignment and v.student == BLANK]
        lines.append(f"| {assignment} | {sum(samples)}/{len(samples)} | {'yes' if all(blank) else 'NO'} |")
    wrong = [f"- {v.student}/{v.assignment}: {v.what}" for v in verdicts if not v.agrees]
    return "\n".join(lines + ["", "Disagreements:" if wrong else "Every sample and blank release is as expected.",
                              *wrong]) + "\n"
