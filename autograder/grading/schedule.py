"""The order in which submissions go to the workers: the longest first, as far as earlier runs tell.

With the workers fed in name order, a class whose slowest assignment sorts last (08's data
parallelism takes ten times 01's seconds) ends with one worker grading the last slow submissions
while the others idle. Handing out the longest submissions first (the classic LPT rule) keeps every
worker busy until the end. How long a submission of each assignment takes is remembered from the
runs before (the median of each assignment's seconds in OUT/timings.csv, kept in one small file in
the build folder); an assignment never graded on this machine goes first, then name order decides.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path

from autograder.grading.intake import Submission
from autograder.grading.report import Timing
from autograder.paths import BUILD

HISTORY = BUILD / "grading-seconds.json"


def expected_seconds(history: Path = HISTORY) -> dict[str, float]:
    """{assignment: median seconds one of its submissions took in the last run that graded it}."""
    try:
        found = json.loads(history.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {name: float(seconds) for name, seconds in found.items() if isinstance(seconds, (int, float))}


def longest_first(todo: list[Submission], history: Path = HISTORY) -> list[Submission]:
    """`todo` ordered by expected time, longest first (unknown assignments first of all), then by name."""
    expected = expected_seconds(history)
    return sorted(todo, key=lambda s: (-expected.get(s.assignment, float("inf")), s.assignment, s.student))


def remember(timings: list[Timing], history: Path = HISTORY) -> None:
    """Record this run's median seconds per assignment, keeping what earlier runs said of the others."""
    by_assignment: dict[str, list[float]] = {}
    for t in timings:
        by_assignment.setdefault(t.assignment, []).append(t.seconds)
    if not by_assignment:
        return
    expected = expected_seconds(history)
    expected.update({name: round(statistics.median(seconds), 3) for name, seconds in by_assignment.items()})
    history.parent.mkdir(parents=True, exist_ok=True)
    partial = history.with_name(f"{history.name}.{os.getpid()}")  # runs finishing together never mix their writes
    partial.write_text(json.dumps(expected, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(partial, history)
