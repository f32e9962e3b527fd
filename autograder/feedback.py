"""Per-student feedback: each test's name, points, status and failure message, nothing more.

nbgrader's own feedback renders the autograded notebook, hidden test source included
(nbgrader issue #917). This page is built from result rows only, so it cannot leak tests.
"""

from __future__ import annotations

import html
from pathlib import Path

from .results import CellResult

_STYLE = """body{font-family:system-ui,sans-serif;max-width:52rem;margin:2rem auto;padding:0 1rem}
table{border-collapse:collapse;width:100%}td,th{border-bottom:1px solid #ddd;padding:.4rem;text-align:left;vertical-align:top}
.passed{color:#1a7f37}.failed,.error,.timeout{color:#cf222e}code{white-space:pre-wrap}"""


def render(student: str, assignment: str, rows: list[CellResult]) -> str:
    """The feedback page for one student's assignment as a standalone HTML document."""
    score = sum(r.score for r in rows)
    total = sum(r.max_score for r in rows)
    body = "".join(
        f"<tr><td>{html.escape(r.grade_id or '(submission)')}</td><td>{r.score:g} / {r.max_score:g}</td>"
        f"<td class='{r.status}'>{r.status}</td><td><code>{html.escape(r.message)}</code></td></tr>"
        for r in rows
    )
    return (f"<!doctype html><meta charset='utf-8'><title>{html.escape(assignment)}: feedback</title>"
            f"<style>{_STYLE}</style><h1>{html.escape(assignment)}</h1>"
            f"<p>Student <b>{html.escape(student)}</b>: <b>{score:g} / {total:g}</b> points.</p>"
            f"<table><tr><th>test</th><th>points</th><th>status</th><th>what went wrong</th></tr>{body}</table>")


def write_feedback(out: Path, student: str, assignment: str, rows: list[CellResult]) -> Path:
    """Write OUT/feedback/<student>/<assignment>/feedback.html and return its path."""
    folder = out / "feedback" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "feedback.html"
    path.write_text(render(student, assignment, rows), encoding="utf-8")
    return path
