"""Per-student feedback: each test's name, points, status and failure message, nothing more.

A test voided for tampering (status "tampered") says what changed, and the page says why it scores 0.
A failure whose behaviour matches a known mistake of the exercise (hints.py) shows the instructor's hint
beside it, in the lecture's words ("likely mistake: ...").

A test checked on several devices shows one line per device ("test_x on cuda"), so a student
sees that their code passed on the CPU but failed on the GPU, and which devices were not tried
("skipped").

nbgrader's own feedback renders the autograded notebook, hidden test source included
(nbgrader issue #917). This page is built from result rows only, so it cannot leak tests. It is
rendered from templates/feedback.html.j2 with autoescape on: names and messages come from student code.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import jinja2

from autograder.grading.hints import hints_by_test, likely_mistakes
from autograder.grading.results import CellResult, cell_scores
from autograder.paths import FEEDBACK_TEMPLATES


@lru_cache(maxsize=1)
def _template() -> jinja2.Template:
    """The page's template; autoescape on, since messages and names come from student code."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(FEEDBACK_TEMPLATES), autoescape=True,
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return env.get_template("feedback.html.j2")


def _test_name(row: CellResult) -> str:
    """The test's name, with the device it ran on when the test checks devices."""
    name = row.grade_id or "(submission)"
    return f"{name} on {row.device}" if row.device else name


def render(student: str, assignment: str, rows: list[CellResult]) -> str:
    """The feedback page for one student's assignment as a standalone HTML document."""
    scores = cell_scores(rows).values()  # a test with several device rows counts once
    hints, shown = hints_by_test(likely_mistakes(rows)), set()
    tests = []
    for r in rows:  # a test's hints beside its first failing row
        first = r.status not in ("passed", "skipped") and r.grade_id not in shown
        shown |= {r.grade_id} if first else set()
        tests.append((_test_name(r), r, hints.get(r.grade_id, []) if first else []))
    return _template().render(student=student, assignment=assignment,
                              score=sum(s for s, _ in scores), total=sum(t for _, t in scores),
                              tampered=any(r.status == "tampered" for r in rows), tests=tests)


def write_feedback(out: Path, student: str, assignment: str, rows: list[CellResult]) -> Path:
    """Write OUT/feedback/<student>/<assignment>/feedback.html and return its path."""
    folder = out / "feedback" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "feedback.html"
    path.write_text(render(student, assignment, rows), encoding="utf-8")
    return path
