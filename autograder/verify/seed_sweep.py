"""Every seed is fair: run the hidden tests on the reference and on the corpus's correct answers over many seeds.

    python -m autograder.verify.seed_sweep [ASSIGNMENT ...] [--seeds 200] [--budget 30] [--min-seeds 20]
                                           [--with-corpus] [--tests test_a,test_b] [--seed N ...] [--notebook PATH]
    make accuracy [SEEDS=2000 SEED_BUDGET=60 SEED_MIN=20]      (.ci/run: SEEDS=200 SEED_BUDGET=2 SEED_MIN=5)

Each student's hidden tests draw their inputs from a seed of their own (dlkit.seeding.seed_for), so a
test whose tolerance or expected value is off for some inputs takes points from some students and
not others. For each assignment (all by default) and each answer (the instructor's solutions, and with
--with-corpus every `[[correct]]` entry of autograder/corpus/<assignment>.toml swapped in), one fresh
process runs the notebook's cells in an IPython shell, then each test cell once per seed, after
`dlkit.seed_everything(seed)` as the grader's SeedTests does, on the devices the default grader uses
on this machine (cpu and the simulated fakegpu). Seeds are made as the grader makes them (seed_for of
made-up students), plus any given with --seed.

A test gets every seed it can within --budget seconds (at least the first --min-seeds): 07's exports and
08's process launches take seconds each, the rest milliseconds. The table says how many seeds each
assignment's slowest test got. Exit status 1 where any answer loses a point on any seed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

import nbformat

from autograder.course import assignments

#: Seeds every test gets by default, whatever its budget: the first ones are the same for every run.
MIN_SEEDS = 20


@dataclass
class Sweep:
    """What one answer did over the seeds: failures by test, seeds each test got."""

    assignment: str
    answer: str
    failures: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    seeds_run: dict[str, int] = field(default_factory=dict)
    error: str = ""  # a cell above the tests failed: nothing was swept


def test_cells(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(grade_id, source) of every graded test cell (graded, not a solution)."""
    found = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            found.append((meta["grade_id"], cell.source))
    return found


def sweep_seeds(assignment: str, count: int, extra: list[int]) -> list[int]:
    """`count` seeds as the grader draws them for made-up students, then `extra`."""
    from dlkit.seeding import seed_for

    return [seed_for(f"sweep-{i}", assignment, "sweep") for i in range(count)] + extra


def sweep(notebook: Path, seeds: list[int], only: set[str] | None = None, answers: dict[str, str] | None = None,
          budget: float = float("inf"), assignment: str = "", answer: str = "reference",
          min_seeds: int = MIN_SEEDS) -> Sweep:
    """Run `notebook` (its solution cells replaced by `answers`, by grade_id) in one IPython shell of this
    process, then every test cell (or those in `only`) over `seeds`, each within `budget` seconds (but at
    least `min_seeds` of them)."""
    from IPython.core.interactiveshell import InteractiveShell

    from dlkit.seeding import seed_everything

    result = Sweep(assignment or notebook.stem, answer)
    nb = nbformat.read(notebook, as_version=4)
    tests = {gid for gid, _ in test_cells(nb)}
    chosen = [i for i, cell in enumerate(nb.cells) if cell.metadata.get("nbgrader", {}).get("grade_id") in tests
              and (not only or cell.metadata["nbgrader"]["grade_id"] in only)]
    shell = InteractiveShell.instance()
    for cell in nb.cells[:max(chosen, default=-1)]:  # a test depends only on the cells above it
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and grade_id not in tests:
            ran = shell.run_cell((answers or {}).get(grade_id, cell.source), silent=True)
            if not ran.success:
                result.error = f"cell {grade_id or '(no id)'} failed: {ran.error_in_exec or ran.error_before_exec!r}"
                return result
    for grade_id, source in test_cells(nb):
        if only and grade_id not in only:
            continue
        started = time.perf_counter()
        for number, seed in enumerate(seeds):
            if number >= min_seeds and time.perf_counter() - started > budget:
                break
            seed_everything(seed)
            ran = shell.run_cell(source, silent=True)
            result.seeds_run[grade_id] = number + 1
            if not ran.success:
                error = ran.error_in_exec or ran.error_before_exec
                result.failures.setdefault(grade_id, []).append((seed, f"{type(error).__name__}: {error}"[:300]))
    return result


def answers_to_sweep(assignment: str, with_corpus: bool) -> list[tuple[str, dict[str, str]]]:
    """("reference", {}) and, with the corpus, its correct entries packed as `make accuracy` packs them (one
    notebook holds entries of different exercises; every one of them is right, so every test must pass)."""
    found: list[tuple[str, dict[str, str]]] = [("reference", {})]
    if with_corpus:
        from autograder.verify.accuracy import load_corpus, pack

        for group in pack([e for e in load_corpus([assignment]) if e.kind == "correct"]):
            cells = {name: source for e in group for name, source in e.cells.items()}
            found.append((f"correct answers to {', '.join(e.exercise for e in group)}", cells))
    return found


def _sweep_in_child(notebook: str, seeds: list[int], only: set[str] | None, answers: dict[str, str],
                    budget: float, assignment: str, answer: str, min_seeds: int) -> Sweep:
    """sweep() in a process of its own (a fresh shell per answer: no state carried from another), its cells'
    printing dropped."""
    os.environ.update({"DLKIT_DEVICES": os.environ.get("DLKIT_DEVICES", "cpu,fakegpu"), "MPLBACKEND": "Agg"})
    with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
        return sweep(Path(notebook), seeds, only, answers, budget, assignment, answer, min_seeds)


def _sweep_alone(notebook: str, seeds: list[int], only: set[str] | None, answers: dict[str, str], budget: float,
                 assignment: str, answer: str, min_seeds: int) -> Sweep:
    """_sweep_in_child in a process pool of its own, so that a process that dies is that answer's error,
    named in the report, and not the end of the whole sweep."""
    try:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            return pool.submit(_sweep_in_child, notebook, seeds, only, answers, budget, assignment, answer,
                               min_seeds).result()
    except BrokenProcessPool as died:
        return Sweep(assignment, answer, error=f"its process died ({died})")


def report(sweeps: list[Sweep], seeds: int) -> str:
    """A Markdown table per assignment, then every failure."""
    lines = ["| assignment | answers swept | tests | seeds per test (fewest) | answers losing a point |",
             "|---|---|---|---|---|"]
    for assignment in dict.fromkeys(s.assignment for s in sweeps):
        mine = [s for s in sweeps if s.assignment == assignment]
        counts = [n for s in mine for n in s.seeds_run.values()]
        losing = sum(bool(s.failures or s.error) for s in mine)
        tests = max((len(s.seeds_run) for s in mine), default=0)
        lines.append(f"| {assignment} | {len(mine)} | {tests} | {min(counts, default=0)} of {seeds} | {losing} |")
    for s in sweeps:
        if s.error:
            lines.append(f"\n{s.assignment}, {s.answer}: not swept, {s.error}")
        for grade_id, failed in s.failures.items():
            lines.append(f"\n{s.assignment}, {s.answer}: {grade_id} failed on {len(failed)} of "
                         f"{s.seeds_run[grade_id]} seeds, e.g.")
            lines += [f"  seed {seed}: {error}" for seed, error in failed[:3]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignments", nargs="*", help="e.g. 02_backprop (default: every assignment)")
    parser.add_argument("--notebook", type=Path, default=None, help="another copy of one assignment's source")
    parser.add_argument("--seeds", type=int, default=200, help="seeds drawn as the grader draws them")
    parser.add_argument("--seed", type=int, action="append", default=[], help="a seed to include (repeatable)")
    parser.add_argument("--tests", default="", help="comma-separated grade ids (default: every test cell)")
    parser.add_argument("--budget", type=float, default=float("inf"), help="seconds per test and answer")
    parser.add_argument("--min-seeds", type=int, default=MIN_SEEDS, help="seeds every test gets, whatever its budget")
    parser.add_argument("--with-corpus", action="store_true", help="sweep the corpus's correct answers too")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="answers swept at once")
    parser.add_argument("--out", type=Path, default=None, help="also write the report here (Markdown)")
    args = parser.parse_args(argv)
    names = args.assignments or list(assignments())
    only = {t for t in args.tests.split(",") if t} or None
    jobs = [(str(args.notebook or assignments()[name]), sweep_seeds(name, args.seeds, args.seed), only, answers,
             args.budget, name, answer, args.min_seeds)
            for name in names for answer, answers in answers_to_sweep(name, args.with_corpus)]
    with ThreadPoolExecutor(args.workers) as threads:
        sweeps = list(threads.map(lambda job: _sweep_alone(*job), jobs))
    text = report(sweeps, args.seeds + len(args.seed))
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text, encoding="utf-8")
    return 1 if any(s.failures or s.error for s in sweeps) else 0


if __name__ == "__main__":
    sys.exit(main())
