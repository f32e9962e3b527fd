"""Per-student feedback: each test's name, points, status and failure message, nothing more.

A test voided for tampering (status "tampered") says what changed, and the page says why it scores 0.

A test checked on several devices shows one line per device ("test_x on cuda"), so a student
sees that their code passed on the CPU but failed on the GPU, and which devices were not tried
("skipped").

nbgrader's own feedback renders the autograded notebook, hidden test source included
(nbgrader issue #917). This page is built from result rows only, so it cannot leak tests.
"""

from __future__ import annotations

import html
from pathlib import Path

from autograder.grading.results import CellResult, cell_scores

_STYLE = """body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.4rem;text-align:left;vertical-align:top}
.passed{color:#1a7f37}.failed,.error,.timeout,.tampered{color:#cf222e}.skipped{color:#9a6700}code{white-space:pre-wrap}"""


def _test_name(row: CellResult) -> str:
    """The test's name, with the device it ran on when the test checks devices."""
    name = row.grade_id or "(submission)"
    return f"{name} on {row.device}" if row.device else name


def render(student: str, assignment: str, rows: list[CellResult]) -> str:
    """The feedback page for one student's assignment as a standalone HTML document."""
    scores = cell_scores(rows).values()  # a test with several device rows counts once
    score = sum(s for s, _ in scores)
    total = sum(t for _, t in scores)
    body = "".join(
        f"<tr><td>{html.escape(_test_name(r))}</td><td>{r.score:g} / {r.max_score:g}</td>"
        f"<td class='{r.status}'>{r.status}</td><td><code>{html.escape(r.message)}</code></td></tr>"
        for r in rows
    )
    tampered = ("<p class='tampered'><b>Some tests were voided (status <code>tampered</code>): while they ran, "
                "your notebook had changed functions or settings the tests rely on, or was running code of its "
                "own in a background thread. Such a test scores 0 whatever your answer.</b></p>"
                if any(r.status == "tampered" for r in rows) else "")
    return (f"<!doctype html><meta charset='utf-8'><title>{html.escape(assignment)}: feedback</title>"
            f"<style>{_STYLE}</style><h1>{html.escape(assignment)}</h1>"
            f"<p>Student <b>{html.escape(student)}</b>: <b>{score:g} / {total:g}</b> points.</p>{tampered}"
            f"<table><tr><th>test</th><th>points</th><th>status</th><th>what went wrong</th></tr>{body}</table>")


def write_feedback(out: Path, student: str, assignment: str, rows: list[CellResult]) -> Path:
    """Write OUT/feedback/<student>/<assignment>/feedback.html and return its path."""
    folder = out / "feedback" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "feedback.html"
    path.write_text(render(student, assignment, rows), encoding="utf-8")
    return path
