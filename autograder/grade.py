"""Grade a whole class: python -m autograder.grade SUBMISSIONS OUT [--workers N] [--with-blank]

Reads SUBMISSIONS/<student>/<assignment>/*.ipynb, autogrades each submission with nbgrader in
its own workspace (several at once), and writes into OUT:
  grades.csv      student_id, assignment, score, max_score, devices, skipped_devices
  results.csv     one row per test cell and device with a message and a status:
                  passed/failed/error/timeout/skipped/tampered
  feedback/<student>/<assignment>/feedback.html   what the student may see (no test source)
  autograded/<student>/<assignment>/              the executed notebooks, for the TA only
  tampered.csv    the tests voided because the submission tampered with what tests rely on (only if any)
  timings.csv     seconds each submission graded in this run took, and how many of them its cells ran
  report.html     the class report (scores, pass rates, common failures, timings): autograder/grading/class_report.py
  logs/           nbgrader's log for every submission whose grading failed, each worker's log, the zygote's
  gradebook.db, source/, submitted/   the class gradebook: OUT is an nbgrader course directory,
                  so `nbgrader formgrader` and `nbgrader export` work on it
A submission that cannot be graded costs its student the points and the TA nothing: it gets
error rows with the reason, and the rest of the class is graded. A failure of the grading machine
itself (a kernel that cannot start, a worker that dies) is never a student's zero: the submission
is retried once with a cold kernel, and if it fails again the run stops (exit status 3) naming the
cause, keeping what was graded so far for the next run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from autograder import skip_unused_schema_formats
from autograder.grading import interrupt
from autograder.isolation.limits import Limits
from autograder.options import ENGINES, GradingOptions, grading_devices
from dlkit.devices import DEVICES_ENV

if TYPE_CHECKING:  # imported when needed: the zygote starts before the grader's imports
    from autograder.execution.warm import Zygote


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", type=Path, help="folder of <student>/<assignment>/*.ipynb")
    parser.add_argument("out", type=Path, help="folder for grades.csv, results.csv and feedback/")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="submissions graded at once")
    parser.add_argument("--with-blank", action="store_true", help="also grade the blank release as student 'blank'")
    parser.add_argument("--assignments", default="", help="comma-separated assignments to grade (default: all)")
    parser.add_argument("--devices", default=os.environ.get(DEVICES_ENV, "auto"),
                        help="device kinds tests run on: auto (all this machine has; on a machine without an "
                             "accelerator, the simulated fakegpu too) or e.g. cpu,cuda; a kind named but absent "
                             "is reported as skipped")
    defaults = Limits()
    parser.add_argument("--cell-timeout", type=int, default=defaults.cell_timeout, help="seconds per cell")
    parser.add_argument("--notebook-timeout", type=int, default=defaults.notebook_timeout, help="seconds per notebook")
    parser.add_argument("--memory-gb", type=float, default=defaults.memory_bytes / 2**30, help="memory per submission")
    parser.add_argument("--cold-kernels", action="store_true",
                        help="start every kernel from scratch instead of forking it from a warm zygote")
    parser.add_argument("--engine", choices=ENGINES, default="local",
                        help="local worker processes, or a Dask cluster (local unless --scheduler is given)")
    parser.add_argument("--scheduler", default=None, help="address of a running Dask scheduler (with --engine dask)")
    parser.add_argument("--scratch-gb", type=float, default=defaults.scratch_bytes / 2**30,
                        help="size of a kernel's /tmp, /var/tmp, /dev/shm and home together, and of its working folder")
    parser.add_argument("--pass-env", default="",
                        help="comma-separated names of the grader's environment variables kernels may see besides "
                             "the kit's allowlist (e.g. HF_HOME); kernels never see any other")
    parser.add_argument("--allow-unsandboxed", action="store_true",
                        help="grade even where kernels cannot be sandboxed: student code then runs with your rights, "
                             "sees your files and environment and can signal your processes")
    parser.add_argument("--db-url", default=None,
                        help="class gradebook (SQLAlchemy URL, e.g. postgresql://...); default: sqlite in OUT")
    args = parser.parse_args(argv)
    # Stopped with `kill`, `timeout` or a cancelled CI job (SIGTERM, often to the whole process group), stop as on
    # Ctrl-C: every worker and kernel ended, what was graded kept for the next run. Python's default for
    # SIGTERM ends the driver on the spot, and the kernels, in sessions of their own, ran on.
    interrupt.stop_on_signals()
    skip_unused_schema_formats()  # before the imports below reach nbformat and jsonschema
    from autograder.course import assignments

    limits = Limits(cell_timeout=args.cell_timeout, notebook_timeout=args.notebook_timeout,
                    memory_bytes=int(args.memory_gb * 2**30), scratch_bytes=int(args.scratch_gb * 2**30))
    if args.pass_env:
        from autograder.isolation.sandbox import PASS_ENV

        os.environ[PASS_ENV] = args.pass_env  # read where kernels' environments are made: workers, the zygote
    refusal = sandbox_refusal(args.allow_unsandboxed)
    if refusal:
        print(refusal, file=sys.stderr)
        return 2
    try:
        devices = tuple(grading_devices(args.devices))
    except ValueError as err:
        print(f"error: --devices: {err}", file=sys.stderr)
        return 2
    only = {a for a in args.assignments.split(",") if a}
    unknown = only - set(assignments())
    if unknown:
        print(f"error: unknown assignments {sorted(unknown)}; known: {sorted(assignments())}", file=sys.stderr)
        return 2
    options = GradingOptions(out=args.out.resolve(), workers=args.workers, limits=limits, devices=devices,
                             warm_kernels=not args.cold_kernels, engine=args.engine, scheduler=args.scheduler,
                             db_url=args.db_url, allow_unsandboxed=args.allow_unsandboxed)
    zygote = start_zygote_early(args.submissions, only or set(assignments()), args.with_blank, options)
    try:
        return grade(args, options, only, zygote)
    finally:
        if zygote is not None:
            zygote.close()


def sandbox_refusal(allowed: bool) -> str | None:
    """Why the run may not start (student code could not be sandboxed here and the TA did not accept that),
    or None. Where the TA accepted it, a warning is printed instead."""
    from autograder.isolation import sandbox

    reason = sandbox.unavailable_reason()
    if reason is None:
        return None
    if allowed:
        print(f"WARNING: --allow-unsandboxed: student code runs with your rights (your files, environment and "
              f"processes), as you asked: {reason.splitlines()[0]}", file=sys.stderr)
        return None
    return (f"error: student code cannot be sandboxed on this system, so nothing was graded.\n{reason}\n"
            f"(The README's isolation section says what each way of running protects.)")


class Folder(NamedTuple):
    """A <student>/<assignment> folder, all the schedule needs of a submission before intake vets it."""

    student: str
    assignment: str


def start_zygote_early(folder: Path, wanted: set[str], with_blank: bool, options: GradingOptions) -> Zygote | None:
    """The run's zygote (autograder/execution/warm.py), started before the grader imports itself (~1.5 s),
    since its own imports (~5 s for all eight notebooks) are what the first warm kernels wait for; None
    where warm kernels do not apply (cold kernels asked for, a Dask engine) or no folder is to be graded.
    It imports in the order the pipeline will grade (schedule.py), so the first kernels wait only for theirs.

    A guess from the folder names: the pipeline stops it and starts cold kernels, or a zygote of its own,
    if the submissions left to grade once earlier runs are counted call for that.
    """
    if not options.warm_kernels or options.engine != "local":
        return None
    from autograder.execution import warm
    from autograder.grading import schedule
    from autograder.isolation.limits import process_rlimits

    found = [Folder(p.parent.name, p.name) for p in folder.glob("*/*") if p.is_dir() and p.name in wanted]
    found += [Folder("blank", name) for name in sorted(wanted) * with_blank]
    if not found:
        return None
    workers = min(options.workers, len(found))
    order = schedule.warm_start_order(schedule.longest_first(found, options.out), workers, options.devices)
    modules, plan = schedule.zygote_imports(order, workers, options.devices)
    (options.out / "logs").mkdir(parents=True, exist_ok=True)
    return warm.start(modules, options.kernel_environment(workers), options.out / "logs" / "zygote.log",
                      process_rlimits(options.limits), plan)


def grade(args: argparse.Namespace, options: GradingOptions, only: set[str], zygote: Zygote | None) -> int:
    """Release what changed, find the submissions, grade them (forking kernels from `zygote` when it is the
    one the run needs), print the table; the exit status."""
    from autograder.authoring.release import build_release
    from autograder.course import assignments
    from autograder.grading.intake import discover
    from autograder.grading.pipeline import InfrastructureError, blank_submissions, grade_class
    from autograder.grading.report import grade_table, tampered_summary, write_tampered
    from autograder.isolation.limits import become_subreaper
    from autograder.paths import BUILD

    if not sys.platform.startswith("linux"):
        print("WARNING: memory limits and clean-up of left-over processes need Linux; grading without them",
              file=sys.stderr)
    build_release()  # incremental: releases only what changed since the last build
    try:
        submissions = discover(args.submissions, set(assignments()), BUILD)
    except FileNotFoundError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.with_blank:
        submissions += blank_submissions()
    if only:
        submissions = [s for s in submissions if s.assignment in only]
    if not submissions:
        print(f"error: no <student>/<assignment>/ folders under {args.submissions}", file=sys.stderr)
        return 2
    for s in submissions:
        if s.problem:
            print(f"cannot grade {s.student}/{s.assignment}: {s.problem}", file=sys.stderr)
        elif s.note:
            print(f"note: {s.student}/{s.assignment}: {s.note}", file=sys.stderr)
    with contextlib.suppress(OSError, AttributeError):  # Linux only; elsewhere Ctrl-C may leave kernels behind
        become_subreaper()  # so that on Ctrl-C no kernel outlives the run, even one a worker left behind
    try:
        rows = grade_class(submissions, options, zygote)
    except KeyboardInterrupt:
        return 130
    except InfrastructureError as err:
        print(f"\nerror: grading stopped because the grading machine failed, not a student: {err}\n"
              f"No grade was recorded for that submission, and no grades.csv was written. Submissions graded "
              f"so far are kept in {args.out}/.done: fix the cause (the workers' logs are in {args.out}/logs) "
              f"and run the same command again to finish.", file=sys.stderr)
        return 3
    print(grade_table(rows))
    print(f"\nwrote {args.out}/grades.csv, results.csv, report.html, feedback/ and the class gradebook for "
          f"{len(submissions)} submissions")
    if write_tampered(args.out, rows):
        print(f"\n{tampered_summary(rows)}\n(listed in {args.out}/tampered.csv)")
    return 0


def exit_at_once(status: int) -> NoReturn:
    """End the command once every file is written and closed, skipping Python's teardown of the grader's
    thousands of modules: 0.3-0.4 s at the end of every run (measured), with nothing left to do. The run's
    processes (workers, zygote, report builder) are stopped by then, and every file it wrote was closed
    by the `with` that opened it; only the standard streams are left to flush."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_at_once(main())
