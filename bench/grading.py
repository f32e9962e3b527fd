"""make bench: stock sequential `nbgrader autograde` against the kit, on the same cohort, in one run.

The cohort: for every assignment, the reference and the first buggy samples (correct and wrong
answers mixed), at least 24 submissions. Both grade it from the same release on this machine,
one after the other, each as its users run it (stock nbgrader once per assignment, the kit once
for the whole class); the scores must agree (bench/stock_nbgrader.py says the one documented
difference). Written to bench/results.md:
- wall time of each whole class run, and their ratio (the headline: what a TA waits for);
- per submission, medians: stock's time (gaps between the autograded files it writes, in
  order) and the kit's (each worker's wall time per submission, OUT/timings.csv);
- overhead per submission beyond the notebook's own execution (cell times nbclient records).

Usage: python -m bench.grading [--per-assignment N] [--workers N] [--out bench/results.md]
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.course import REPO, assignments
from autograder.intake import discover
from autograder.release import build_release
from autograder.results import execution_seconds
from autograder.samples import SUBMISSIONS, expected_failures

from .stock_nbgrader import grade_with_stock_nbgrader, scores, unexplained_differences


def cohort(per_assignment: int) -> dict[str, list[str]]:
    """{assignment: [students]}: the reference and the first buggy samples of each assignment."""
    chosen = {}
    for assignment, samples in sorted(expected_failures().items()):
        buggy = sorted(s for s, failing in samples.items() if s.startswith("buggy_") and failing)
        chosen[assignment] = ["reference", *buggy[: per_assignment - 1]]
    return chosen


def stock_per_submission(root: Path) -> list[tuple[float, float]]:
    """(seconds, executing seconds) per submission of a stock run, from when each autograded notebook was written.

    nbgrader grades one submission after another and writes each autograded notebook when done,
    so the gap between consecutive files is one submission's time (the first gap, which includes
    nbgrader's own start, is dropped).
    """
    found = []
    by_assignment: dict[str, list[Path]] = {}
    for path in root.glob("autograded/*/*/*.ipynb"):
        by_assignment.setdefault(path.parent.name, []).append(path)
    for paths in by_assignment.values():
        paths.sort(key=lambda p: p.stat().st_mtime)
        for before, after in zip(paths, paths[1:]):
            found.append((after.stat().st_mtime - before.stat().st_mtime, execution_seconds(after)))
    return found


def executing_total(root: Path) -> float:
    """Seconds all the autograded notebooks under `root` spent running their cells."""
    return sum(execution_seconds(p) for p in root.glob("**/autograded/*/*/*.ipynb"))


def kit_per_submission(out: Path) -> list[tuple[float, float]]:
    with open(out / "timings.csv", newline="", encoding="utf-8") as f:
        return [(float(r["seconds"]), float(r["executing_seconds"])) for r in csv.DictReader(f)]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def report(n: int, workers: int, stock_wall: float, kit_wall: float, stock_each, kit_each, problems,
           stock_cells: float, kit_cells: float) -> str:
    stock_overhead = [total - executing for total, executing in stock_each]
    kit_overhead = [total - executing for total, executing in kit_each]
    lines = [
        "# Grading benchmark: stock nbgrader vs the kit",
        "",
        f"Measured by `make bench` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: "
        f"{os.cpu_count()} cores, {platform.python_version()}, {n} submissions "
        f"(every assignment's reference and buggy samples), graded by both in one run.",
        "",
        "| | stock `nbgrader autograde` (sequential) | kit (`make grade`, warm kernels) |",
        "|---|---|---|",
        f"| whole class, wall time | {stock_wall:.1f} s | {kit_wall:.1f} s ({workers} workers) |",
        f"| per submission, median | {median([t for t, _ in stock_each]):.2f} s | "
        f"{median([t for t, _ in kit_each]):.2f} s (in one worker) |",
        f"| overhead beyond the notebook's own execution, median | {median(stock_overhead):.2f} s | "
        f"{median(kit_overhead):.2f} s |",
        f"| the notebooks' own cells, summed over the class | {stock_cells:.1f} s | {kit_cells:.1f} s "
        f"(spread over {workers} workers) |",
        "",
        f"**Speed-up: {stock_wall / kit_wall:.1f}x** (stock wall time / kit wall time).",
        "",
        f"Ceiling while every cell runs: with no overhead at all and the {workers} workers never idle, the kit "
        f"would still need its cells' {kit_cells:.1f} s / {workers} = {kit_cells / workers:.1f} s, a speed-up "
        f"of at most {stock_wall / (kit_cells / workers):.1f}x on this machine.",
        "",
        "Scores: " + ("identical for every test cell (apart from the documented stderr rule: none differed)."
                      if not problems else "DIFFER:\n" + "\n".join(f"- {p}" for p in problems)),
        "",
        "Stock per-submission times are the gaps between the autograded notebooks nbgrader writes "
        "(the first of each assignment, which includes nbgrader's start, is left out); the kit's come "
        "from OUT/timings.csv. Overhead = time per submission minus the time its cells ran "
        "(nbclient's cell timings). The machine is shared: compare the two columns, not runs on different days.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-assignment", type=int, default=3, help="submissions per assignment (>= 3 for 24)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results.md")
    args = parser.parse_args(argv)

    build_release()
    chosen = cohort(args.per_assignment)
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)
        for assignment, students in chosen.items():
            for student in students:
                shutil.copytree(SUBMISSIONS / student / assignment, work / "class" / student / assignment)
        submissions = discover(work / "class", set(assignments()))
        print(f"benchmarking {len(submissions)} submissions: stock nbgrader first, then the kit", file=sys.stderr)

        # Each as its users run it: stock nbgrader once per assignment, the kit once for the class.
        started = time.perf_counter()
        for assignment in chosen:
            grade_with_stock_nbgrader([s for s in submissions if s.assignment == assignment],
                                      work / "stock" / assignment)
            print(f"stock nbgrader: {assignment} done at {time.perf_counter() - started:.0f} s", file=sys.stderr)
        stock_wall = time.perf_counter() - started
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(work / "class"), str(work / "kit"),
                               "--workers", str(args.workers)], cwd=REPO, capture_output=True, text=True)
        kit_wall = time.perf_counter() - started
        if proc.returncode != 0:
            print(proc.stdout + proc.stderr, file=sys.stderr)
            return 1
        print(f"kit: done in {kit_wall:.0f} s", file=sys.stderr)
        kit_scores, problems, stock_each = scores(work / "kit"), [], []
        for assignment in chosen:
            stock_root = work / "stock" / assignment
            stock_scores = scores(stock_root)
            problems += unexplained_differences(stock_root, stock_scores,
                                                {k: v for k, v in kit_scores.items() if k[1] == assignment})
            stock_each += stock_per_submission(stock_root)
        kit_each = kit_per_submission(work / "kit")
        text = report(len(submissions), args.workers, stock_wall, kit_wall, stock_each, kit_each, problems,
                      executing_total(work / "stock"), executing_total(work / "kit"))
    args.out.write_text(text)
    print(text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
