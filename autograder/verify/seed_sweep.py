"""Every seed is fair: run an instructor source's hidden tests on its own solutions over many seeds.

    python -m autograder.verify.seed_sweep 02_backprop [--seeds 200] [--tests test_a,test_b] [--seed N ...]

Each student's hidden tests draw their inputs from a seed of their own (dlkit.seeding.seed_for), so a
test whose tolerance or expected value is off for some inputs takes points from some students and
not others. This runs the notebook's cells (solutions included) in one IPython shell in this process,
then each test cell once per seed, after `dlkit.seed_everything(seed)` as the grader's SeedTests does,
with seeds made as the grader makes them (seed_for of made-up students) plus any given with --seed.
Exit status 1 and the failing seeds where the reference loses a point on any of them. Devices: cpu.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import nbformat

from autograder.course import assignments


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


def sweep(notebook: Path, seeds: list[int], only: set[str] | None = None) -> dict[str, list[tuple[int, str]]]:
    """{grade_id: [(seed, error)]} for every test cell (or those in `only`) that failed on some seed."""
    from IPython.core.interactiveshell import InteractiveShell

    from dlkit.seeding import seed_everything

    nb = nbformat.read(notebook, as_version=4)
    tests = {gid for gid, _ in test_cells(nb)}
    chosen = [i for i, cell in enumerate(nb.cells) if cell.metadata.get("nbgrader", {}).get("grade_id") in tests
              and (not only or cell.metadata["nbgrader"]["grade_id"] in only)]
    shell = InteractiveShell.instance()
    for cell in nb.cells[:max(chosen, default=-1)]:  # a test depends only on the cells above it
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade_id") not in tests:
            result = shell.run_cell(cell.source, silent=True)
            if not result.success:
                raise RuntimeError(f"{notebook.name}: a setup cell failed: {result.error_in_exec!r}")
    failures: dict[str, list[tuple[int, str]]] = {}
    for grade_id, source in test_cells(nb):
        if only and grade_id not in only:
            continue
        for seed in seeds:
            seed_everything(seed)
            result = shell.run_cell(source, silent=True)
            if not result.success:
                error = result.error_in_exec or result.error_before_exec
                failures.setdefault(grade_id, []).append((seed, f"{type(error).__name__}: {error}"[:300]))
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("assignment", help="e.g. 02_backprop")
    parser.add_argument("--notebook", type=Path, default=None, help="another copy of the source (default: notebooks/)")
    parser.add_argument("--seeds", type=int, default=200, help="seeds drawn as the grader draws them")
    parser.add_argument("--seed", type=int, action="append", default=[], help="a seed to include (repeatable)")
    parser.add_argument("--tests", default="", help="comma-separated grade ids (default: every test cell)")
    args = parser.parse_args(argv)
    os.environ.update({"DLKIT_DEVICES": "cpu", "MPLBACKEND": "Agg"})
    notebook = args.notebook or assignments()[args.assignment]
    only = {t for t in args.tests.split(",") if t} or None
    seeds = sweep_seeds(args.assignment, args.seeds, args.seed)
    failures = sweep(notebook, seeds, only)
    for grade_id, failed in failures.items():
        print(f"{grade_id}: the reference failed on {len(failed)} of {len(seeds)} seeds, e.g.")
        for seed, error in failed[:3]:
            print(f"  seed {seed}: {error}")
    if not failures:
        print(f"{args.assignment}: the reference passed every test on all {len(seeds)} seeds")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
