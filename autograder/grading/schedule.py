"""The order in which submissions go to the workers: the longest first, as far as is known.

With the workers fed in name order, a class whose slowest assignment sorts last (08's data
parallelism takes ten times 01's seconds) ends with one worker grading the last slow submissions
while the others idle. Handing out the longest submissions first (the classic LPT rule) keeps every
worker busy until the end. How long a submission of each assignment takes is the median of the
seconds its cells ran in the last run into the same OUT (OUT/timings.csv), else the seconds measured
on the kit's 2-core reference machine (TYPICAL_SECONDS, committed: only their order matters); an
assignment in neither goes first, then name order decides.

The cells' seconds, not the submission's: the first submissions of a run also wait for the zygote's
imports, which would make the assignment graded first look long. Nothing outside OUT is remembered:
what one class's hostile submissions (or the kit's own tests) took does not reorder another class.

One exception at the start (warm_start_first): while the run's zygote is still importing, the first
kernels can start only once what they need is loaded, so the first submissions handed out are those
whose notebooks need the fewest libraries.
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from autograder.course import assignments
from autograder.execution import warm
from autograder.grading.csv_cells import read_rows
from autograder.paths import TYPICAL_SECONDS


class HandedIn(Protocol):
    """A submission as far as its order goes (intake.Submission is one)."""

    student: str
    assignment: str


Submission = TypeVar("Submission", bound=HandedIn)


def typical_seconds(typical: Path = TYPICAL_SECONDS) -> dict[str, float]:
    try:
        found = json.loads(typical.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {name: float(seconds) for name, seconds in found.items() if isinstance(seconds, (int, float))}


def measured_seconds(out: Path) -> dict[str, float]:
    """{assignment: median seconds of its submissions' cells} from the last run's OUT/timings.csv."""
    by_assignment: dict[str, list[float]] = {}
    try:
        rows = read_rows(out / "timings.csv")
    except (OSError, csv.Error):
        return {}
    for row in rows:
        try:
            by_assignment.setdefault(row["assignment"], []).append(float(row["executing_seconds"]))
        except (KeyError, TypeError, ValueError):
            continue
    return {name: statistics.median(seconds) for name, seconds in by_assignment.items()}


def expected_seconds(out: Path | None = None, typical: Path = TYPICAL_SECONDS) -> dict[str, float]:
    """{assignment: seconds its cells are expected to run}: the last run into `out`, else the kit's typical figure."""
    return {**typical_seconds(typical), **(measured_seconds(out) if out is not None else {})}


def longest_first(todo: Sequence[Submission], out: Path | None = None, typical: Path = TYPICAL_SECONDS
                  ) -> list[Submission]:
    """`todo` ordered by expected time, longest first (unknown assignments first of all), then by name."""
    expected = expected_seconds(out, typical)
    return sorted(todo, key=lambda s: (-expected.get(s.assignment, float("inf")), s.assignment, s.student))


def warm_start_first(order: Sequence[Submission], workers: int, modules: Callable[[str], Sequence[str]]
                     ) -> list[Submission]:
    """`order` (longest first) with its first `workers` submissions taken from the assignments whose kernels
    need the fewest libraries (`modules(assignment)`, counted by top-level package outside the standard
    library), the longest of those first; the rest in their order.

    A zygote imports what the run needs in the order the submissions come (warm.preload_modules), and forks
    each kernel as soon as the modules that kernel needs are in (~3 s for torch alone, ~7 s with
    TensorFlow and the compiler stack). Starting with the longest (07 needs the compiler stack, 08
    TensorFlow) kept every worker waiting for those; a submission that needs only torch runs while the rest
    loads, and the longest such one leaves the most time for it. The end of the run, where the order
    matters, keeps the longest-first order.
    """
    libraries = {s.assignment: len({m.split(".")[0] for m in modules(s.assignment)} - sys.stdlib_module_names)
                 for s in order}
    if workers <= 0 or len(order) <= workers or libraries[order[0].assignment] == min(libraries.values()):
        return list(order)
    first = sorted(range(len(order)), key=lambda i: (libraries[order[i].assignment], i))[:workers]
    chosen = set(first)
    return [order[i] for i in first] + [s for i, s in enumerate(order) if i not in chosen]


def assignment_order(submissions: Sequence[HandedIn]) -> list[str]:
    """The assignments in the order their first submission comes."""
    return list(dict.fromkeys(s.assignment for s in submissions))


def warm_start_order(todo: Sequence[Submission], workers: int, devices: tuple[str, ...]) -> list[Submission]:
    """`todo` (longest first) with the first submissions those whose kernels the run's zygote can fork soonest."""
    notebooks = assignments()
    return warm_start_first(todo, workers, lambda name: warm.preload_modules(notebooks[name], devices=devices))


def zygote_imports(order: Sequence[HandedIn], workers: int, devices: tuple[str, ...]) -> tuple[tuple[str, ...], dict]:
    """What a run's zygote imports for submissions graded in `order` by `workers` workers, in that order, and
    its plan (warm.import_plan): the command's early zygote and the pipeline's own ask the same."""
    notebooks = assignments()
    modules = warm.preload_modules(*(notebooks[a] for a in assignment_order(order)), devices=devices)
    return modules, warm.import_plan([notebooks[s.assignment] for s in order], workers, devices)
