"""Feedback that names the likely mistake: known wrong answers recognised by how the tests fail.

The instructor writes, per assignment, the mistakes students really make (autograder/hints/<assignment>.toml),
each with a hint in the lecture's words and the behaviour that gives it away: which tests fail, with a
failure message matching a pattern, and (optionally) which tests still pass. A submission whose results
show that behaviour gets the hint in its feedback, beside the failing test; the class report counts the
students per mistake. Matching reads only result rows (statuses and messages on the student's seeded
inputs), never the student's code, and a hint is the instructor's own sentence: it quotes no hidden test
and no solution (tests/unit/test_hints.py checks both against the notebooks).

Where several mistakes of one exercise match, the most specific one (the most conditions) is named.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import tomllib

from autograder.grading.results import CellResult
from autograder.paths import HINTS

FAILED = ("failed", "error", "timeout")


@dataclass(frozen=True)
class Mistake:
    """One known wrong answer: what to tell the student, and the failures that reveal it."""

    id: str
    exercise: str
    hint: str
    fails: dict[str, str]  # test -> regular expression its failure message matches ("" matches any failure)
    passes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def conditions(self) -> int:
        return len(self.fails) + len(self.passes)


@lru_cache(maxsize=None)
def mistakes(assignment: str, folder: Path = HINTS) -> tuple[Mistake, ...]:
    """The known mistakes of an assignment (none when it has no hints file)."""
    path = folder / f"{assignment}.toml"
    if not path.exists():
        return ()
    with open(path, "rb") as f:
        table = tomllib.load(f)
    found = []
    for raw in table.get("mistake", []):
        if not raw.get("fails"):
            raise ValueError(f"{path}: mistake {raw.get('id')!r} names no failing test")
        for pattern in raw["fails"].values():
            re.compile(pattern)
        found.append(Mistake(raw["id"], raw["exercise"], " ".join(raw["hint"].split()), dict(raw["fails"]),
                             tuple(raw.get("passes", ()))))
    ids = [m.id for m in found]
    if len(ids) != len(set(ids)):
        raise ValueError(f"{path}: a mistake id is used twice")
    return tuple(found)


def _outcomes(rows: list[CellResult]) -> dict[str, tuple[bool, str]]:
    """{test: (failed, its failure messages joined)} over every device row of one submission."""
    outcomes: dict[str, tuple[bool, str]] = {}
    for r in rows:
        failed, text = outcomes.get(r.grade_id, (False, ""))
        if r.status in FAILED:
            failed, text = True, f"{text}\n{r.message}" if text else r.message
        outcomes[r.grade_id] = (failed, text)
    return outcomes


def likely_mistakes(rows: list[CellResult], folder: Path = HINTS) -> list[Mistake]:
    """The known mistakes one submission's rows show, the most specific per exercise."""
    if not rows:
        return []
    outcomes = _outcomes(rows)
    matched = [m for m in mistakes(rows[0].assignment, folder)
               if all(outcomes.get(t, (False, ""))[0] and re.search(p, outcomes[t][1]) for t, p in m.fails.items())
               and all(t in outcomes and not outcomes[t][0] for t in m.passes)]
    best: dict[str, int] = {}
    for m in matched:
        best[m.exercise] = max(best.get(m.exercise, 0), m.conditions)
    return [m for m in matched if m.conditions == best[m.exercise]]


def hints_by_test(found: list[Mistake]) -> dict[str, list[str]]:
    """{failing test: the hints it shows}, for the feedback page."""
    shown: dict[str, list[str]] = {}
    for m in found:
        for test in m.fails:
            shown.setdefault(test, []).append(m.hint)
    return shown
