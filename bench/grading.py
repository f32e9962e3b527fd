"""make bench: the kit against stock sequential `nbgrader autograde`, at three class sizes, in one run.

Sizes, each graded by both from the same release on this machine, alternately (stock, kit, stock,
kit, ...) so that a change in the machine's load hits both:
- 1 submission (01's reference), median of `--repeats` runs, and a regrade of it right after
  (release current, submission unchanged);
- 8 submissions of one notebook (eight students handing in 01's reference), median of `--repeats`;
- the cohort: for every assignment the reference and the first buggy samples, 24 submissions, once.
The kit runs as a TA runs it, `make grade` with its default flags (the release check included);
stock nbgrader once per assignment, in a course directory laid out from the same release. Scores
must agree at every size (bench/stock_nbgrader.py says the one documented difference).

Written to bench/results.md: wall times and speed-ups per size; for the cohort, the ceiling
(its cells' time spread over the workers) and how close the kit gets; per-submission medians and
overhead beyond the notebook's own cells; and where the kit's fixed time goes (command start,
release check, zygote start, class gradebook), each measured on its own, median of three. Then the class
report's similar-submissions section for 1,000 students x 40 exercises (bench/similarity.py, which also
runs alone).

Usage: python -m bench.grading [--workers N] [--repeats N] [--out bench/results.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from autograder.authoring.release import build_release
from autograder.authoring.samples import SUBMISSIONS, expected_failures
from autograder.course import assignments
from autograder.execution import warm
from autograder.grading.csv_cells import read_rows
from autograder.grading.gradebook import write_class_gradebook
from autograder.grading.intake import Submission, discover
from autograder.grading.report import read_results
from autograder.grading.results import execution_seconds
from autograder.paths import REPO

from . import similarity
from .stock_nbgrader import failed_off_the_cpu, grade_with_stock_nbgrader, scores, unexplained_differences


def cohort(per_assignment: int) -> dict[str, list[str]]:
    """{assignment: [samples]}: the reference and the first buggy samples of each assignment."""
    chosen = {}
    for assignment, samples in sorted(expected_failures().items()):
        buggy = sorted(s for s, failing in samples.items() if s.startswith("buggy_") and failing)
        chosen[assignment] = ["reference", *buggy[: per_assignment - 1]]
    return chosen


def lay_out_class(folder: Path, handed_in: list[tuple[str, str, str]]) -> list[Submission]:
    """A class folder in which each (student, sample, assignment) is that student's copy of a sample."""
    for student, sample, assignment in handed_in:
        shutil.copytree(SUBMISSIONS / sample / assignment, folder / student / assignment)
    return discover(folder, set(assignments()))


def timed(run: Callable[[], object]) -> float:
    started = time.perf_counter()
    run()
    return time.perf_counter() - started


def stock(submissions: list[Submission], root: Path) -> None:
    """Stock nbgrader as a course without the kit runs it: `nbgrader autograde` once per assignment."""
    for assignment in sorted({s.assignment for s in submissions}):
        grade_with_stock_nbgrader([s for s in submissions if s.assignment == assignment], root / assignment)


def kit(class_dir: Path, out: Path, workers: int) -> None:
    """`make grade` with its default flags, as docs/tas.md tells a TA to run it."""
    proc = subprocess.run(["make", "-s", "grade", f"SUBMISSIONS={class_dir}", f"OUT={out}", f"WORKERS={workers}",
                           f"PY={sys.executable}"], cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"make grade failed:\n{proc.stdout}{proc.stderr}")


def differences(submissions: list[Submission], stock_root: Path, kit_out: Path) -> list[str]:
    kit_scores, off_cpu = scores(kit_out), failed_off_the_cpu(kit_out)
    found = []
    for assignment in sorted({s.assignment for s in submissions}):
        root = stock_root / assignment
        found += unexplained_differences(root, scores(root),
                                         {k: v for k, v in kit_scores.items() if k[1] == assignment}, off_cpu)
    return found


def side_by_side(submissions: list[Submission], class_dir: Path, work: Path, workers: int, repeats: int
                 ) -> tuple[list[float], list[float], list[str]]:
    """Stock and kit on the same class, alternately `repeats` times: (stock seconds, kit seconds, score differences)."""
    stock_times, kit_times, problems = [], [], []
    for i in range(repeats):
        stock_root, kit_out = work / f"stock-{i}", work / f"kit-{i}"
        stock_times.append(timed(lambda: stock(submissions, stock_root)))
        kit_times.append(timed(lambda: kit(class_dir, kit_out, workers)))
        problems += differences(submissions, stock_root, kit_out)
    return stock_times, kit_times, sorted(set(problems))


def kit_per_submission(out: Path) -> list[tuple[float, float]]:
    return [(float(r["seconds"]), float(r["executing_seconds"])) for r in read_rows(out / "timings.csv")]


def stock_per_submission(root: Path) -> list[tuple[float, float]]:
    """(seconds, executing seconds) per submission of a stock run, from when each autograded notebook was written
    (nbgrader writes each when done; the first gap of an assignment, which includes nbgrader's start, is dropped)."""
    found = []
    by_assignment: dict[str, list[Path]] = {}
    for path in root.glob("*/autograded/*/*/*.ipynb"):
        by_assignment.setdefault(path.parent.name, []).append(path)
    for paths in by_assignment.values():
        paths.sort(key=lambda p: p.stat().st_mtime)
        for before, after in zip(paths, paths[1:]):
            found.append((after.stat().st_mtime - before.stat().st_mtime, execution_seconds(after)))
    return found


def executing_total(root: Path) -> float:
    """Seconds all the autograded notebooks under `root` spent running their cells."""
    return sum(execution_seconds(p) for p in root.glob("**/autograded/*/*/*.ipynb"))


def fixed_costs(kit_out: Path) -> dict[str, float]:
    """What every kit run pays whatever the class, each measured alone, median of three."""
    def median_of(run: Callable[[], object]) -> float:
        return statistics.median(timed(run) for _ in range(3))

    def zygote_start(modules: tuple[str, ...]) -> None:
        zygote = warm.Zygote.spawn(modules)
        try:
            zygote.ready()
        finally:
            zygote.close()

    rows = read_results(kit_out)
    students = len({r.student_id for r in rows})

    def gradebook() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            write_class_gradebook(f"sqlite:///{tmp}/gradebook.db", rows)

    def release_check() -> None:  # what `make grade` runs before grading when nothing changed
        subprocess.run(["make", "-s", "release", f"PY={sys.executable}"], cwd=REPO, check=True, capture_output=True)
        build_release()

    whole_class = warm.preload_modules(*assignments().values())
    return {
        "command start (Python, imports of the grader, while the zygote starts)": median_of(
            lambda: subprocess.run([sys.executable, "-c", "import autograder.grade, autograder.grading.pipeline, "
                                    "autograder.authoring.release"], cwd=REPO, check=True)),
        "release check (`make release` and the grader's own check, release current)": median_of(release_check),
        "zygote start, 01 only (once per run, begun before the command's own imports)": median_of(
            lambda: zygote_start(warm.preload_modules(assignments()["01_tensors"]))),
        "zygote start, all eight notebooks (once per run)": median_of(lambda: zygote_start(whole_class)),
        f"class gradebook, {students} new submissions at once (a run writes each as it arrives)": median_of(gradebook),
    }


def report(workers: int, sizes: dict[str, tuple[list[float], list[float]]], regrade: list[float],
           cohort_detail: dict[str, float], stock_each, kit_each, fixed: dict[str, float], problems: list[str]) -> str:
    def med(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    lines = [
        "# Grading benchmark: stock nbgrader vs the kit",
        "",
        f"Measured by `make bench` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, kit with {workers} workers and `make grade`'s default flags (release "
        "check included); stock `nbgrader autograde` one submission after another. Both in this one run, "
        "alternately; medians where a size was run more than once.",
        "",
        "| class | stock nbgrader | kit (`make grade`) | speed-up | runs |",
        "|---|---|---|---|---|",
    ]
    for name, (stock_times, kit_times) in sizes.items():
        lines.append(f"| {name} | {med(stock_times):.1f} s | {med(kit_times):.1f} s | "
                     f"**{med(stock_times) / med(kit_times):.2f}x** | {len(kit_times)} |")
    lines.append(f"| regrade of the 1 submission, unchanged, right after | | {med(regrade):.1f} s | | {len(regrade)} |")
    stock_wall, kit_wall, cells = cohort_detail["stock"], cohort_detail["kit"], cohort_detail["kit cells"]
    ceiling = stock_wall / (cells / workers)
    lines += [
        "",
        f"**Ceiling for the cohort**: with no overhead and the {workers} workers never idle, the kit would still need "
        f"its cells' {cells:.1f} s / {workers} = {cells / workers:.1f} s: a speed-up of at most {ceiling:.2f}x. "
        f"Reached: {stock_wall / kit_wall:.2f}x, **{100 * (stock_wall / kit_wall) / ceiling:.0f}% of the ceiling**.",
        "",
        "Cohort, per submission (median) | stock | kit",
        "---|---|---",
        f"time in one worker | {med([t for t, _ in stock_each]):.2f} s | {med([t for t, _ in kit_each]):.2f} s",
        f"overhead beyond the notebook's own cells | {med([t - e for t, e in stock_each]):.2f} s | "
        f"{med([t - e for t, e in kit_each]):.2f} s",
        "",
        "Where the kit's fixed time goes (each measured alone, median of three) | seconds",
        "---|---",
        *[f"{name} | {seconds:.2f}" for name, seconds in fixed.items()],
        "",
        "Scores: " + ("identical for every test cell at every size, apart from the documented differences (stderr; "
                      "device bugs only the kit's accelerator rows show)."
                      if not problems else "DIFFER:\n" + "\n".join(f"- {p}" for p in problems)),
        "",
        "Stock per-submission times are the gaps between the autograded notebooks nbgrader writes (the first of each "
        "assignment, which includes nbgrader's start, is left out); the kit's come from OUT/timings.csv. The machine "
        "is shared: compare the columns of one run, not runs on different days.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3, help="runs of the 1- and 8-submission classes (median)")
    parser.add_argument("--per-assignment", type=int, default=3, help="cohort submissions per assignment (3: 24)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results.md")
    args = parser.parse_args(argv)

    build_release()
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        work = Path(tmp)
        sizes, problems = {}, []
        one = lay_out_class(work / "one", [("ada", "reference", "01_tensors")])
        eight = lay_out_class(work / "eight", [(f"student{i}", "reference", "01_tensors") for i in range(1, 9)])
        whole = lay_out_class(work / "cohort", [(sample, sample, assignment)
                                                for assignment, samples in cohort(args.per_assignment).items()
                                                for sample in samples])

        print("1 submission ...", file=sys.stderr)
        stock_times, kit_times, found = side_by_side(one, work / "one", work / "run-one", args.workers, args.repeats)
        sizes["1 submission (01)"] = (stock_times, kit_times)
        problems += found
        regrade = [timed(lambda: kit(work / "one", work / "run-one" / "kit-0", args.workers))
                   for _ in range(args.repeats)]
        print("8 submissions ...", file=sys.stderr)
        stock_times, kit_times, found = side_by_side(eight, work / "eight", work / "run-eight", args.workers,
                                                     args.repeats)
        sizes["8 submissions (01)"] = (stock_times, kit_times)
        problems += found
        print(f"cohort of {len(whole)} ...", file=sys.stderr)
        stock_times, kit_times, found = side_by_side(whole, work / "cohort", work / "run-cohort", args.workers, 1)
        sizes[f"cohort: {len(whole)} submissions, all 8 notebooks"] = (stock_times, kit_times)
        problems += found
        stock_root, kit_out = work / "run-cohort" / "stock-0", work / "run-cohort" / "kit-0"
        detail = {"stock": stock_times[0], "kit": kit_times[0], "kit cells": executing_total(kit_out)}
        print("fixed costs ...", file=sys.stderr)
        fixed = fixed_costs(work / "run-eight" / "kit-0")
        text = report(args.workers, sizes, regrade, detail, stock_per_submission(stock_root),
                      kit_per_submission(kit_out), fixed, sorted(set(problems)))
    print("similar submissions, 1,000 students x 40 exercises ...", file=sys.stderr)
    alike = similarity.measure()
    text += "\n" + similarity.section(alike)
    if alike.found < alike.planted:
        problems.append(f"similarity: {alike.planted - alike.found} planted copies not flagged")
    args.out.write_text(text)
    print(text)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
