"""Grade a whole class: python -m autograder.grade SUBMISSIONS OUT [--workers N] [--with-blank]

Reads SUBMISSIONS/<student>/<assignment>/*.ipynb, autogrades each submission with nbgrader in
its own workspace (several at once), and writes into OUT:
  grades.csv      student_id, assignment, score, max_score, devices, skipped_devices
  results.csv     one row per test cell and device with status passed/failed/error/timeout/skipped/tampered and a message
  feedback/<student>/<assignment>/feedback.html   what the student may see (no test source)
  autograded/<student>/<assignment>/              the executed notebooks, for the TA only
  tampered.csv    the tests voided because the submission tampered with what tests rely on (only if any)
  timings.csv     seconds each submission graded in this run took, and how many of them its cells ran
  report.html     the class report (scores, pass rates, common failures, timings): autograder/class_report.py
  logs/           nbgrader's log for every submission whose grading failed, and each worker's log
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
import importlib
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from dlkit.devices import DEVICES_ENV, resolve_devices
from tqdm.auto import tqdm

from . import resume, sandbox, schedule, warm
from .autograde import Workspace, infrastructure_failure, prepare_workspace, run_autograde
from .course import BUILD, RELEASE, assignments
from .engines import ENGINES, dask_engine, kernel_environment, local_engine
from .feedback import write_feedback
from .gradebook import class_db_url, class_gradebook, lay_out_course
from .intake import Submission, discover
from .limits import Limits, become_subreaper, kill_descendants
from .release import build_release
from .report import Timing, grade_table, tampered_summary, write_csvs, write_tampered, write_timings
from .results import CellResult, autograded_cells, collect, execution_seconds


class InfrastructureError(RuntimeError):
    """The grading machine failed on a submission twice (its kernel could not start): the run stops."""


def grade_submission(submission: Submission, out: Path, limits: Limits, warm_kernels: bool = True,
                     preload: tuple[str, ...] = ()) -> tuple[list[CellResult], Timing]:
    """Autograde one vetted submission (runs in a worker process); return its rows and where the time went.

    With `warm_kernels`, the kernel is forked from this worker's zygote (autograder/warm.py), which
    imported `preload` (the libraries of the run's assignments) once for all the worker's submissions.
    A kernel that cannot start, or fails before any student code ran, is the machine's fault:
    the submission is graded once more with a cold kernel, and if that fails too,
    InfrastructureError stops the run rather than give the student a zero.
    """
    started = time.perf_counter()
    if warm_kernels:  # started, not waited for: a zygote that fails to start means a cold kernel (warm.py)
        warm.activate(preload or warm.preload_modules(assignments()[submission.assignment]))
    workspace, success, log = _autograde_once(submission, out, limits)
    if (reason := infrastructure_failure(log)) is not None:
        print(f"WARNING: {submission.student}/{submission.assignment}: {reason}; retrying once with a cold kernel",
              file=sys.stderr)
        shutil.rmtree(workspace.root, ignore_errors=True)
        with warm.suspended():
            workspace, success, log = _autograde_once(submission, out, limits)
        if (reason := infrastructure_failure(log)) is not None:
            shutil.rmtree(workspace.root, ignore_errors=True)
            raise InfrastructureError(f"{submission.student}/{submission.assignment}: {reason} "
                                      "(and again with a cold kernel)")
    source = workspace.root / "source" / submission.assignment / f"{submission.assignment}.ipynb"
    rows = collect(workspace, source, success, log)
    executing = 0.0
    if workspace.autograded_notebook.exists():
        executing = execution_seconds(workspace.autograded_notebook)
        keep = out / "autograded" / submission.student / submission.assignment
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy2(workspace.autograded_notebook, keep)
    if not success:
        (out / "logs").mkdir(exist_ok=True)
        (out / "logs" / f"{submission.student}--{submission.assignment}.log").write_text(log, encoding="utf-8")
    shutil.rmtree(workspace.root, ignore_errors=True)
    return rows, Timing(submission.student, submission.assignment, time.perf_counter() - started, executing)


def _autograde_once(submission: Submission, out: Path, limits: Limits) -> tuple[Workspace, bool, str]:
    """One nbgrader autograde of `submission` in a fresh workspace: (workspace, success, log)."""
    workspace = prepare_workspace(submission, BUILD, out / ".work")
    class_folder = submission.notebook.resolve().parents[2]  # <class>/<student>/<assignment>/<file>
    success, log = run_autograde(workspace, limits, hide=[out, class_folder])
    return workspace, success, log


def grading_devices(spec: str) -> list[str]:
    """The device kinds every test cell visits: `spec` resolved, and for "auto" on a machine with no
    accelerator, the simulated one (dlkit.fakegpu) as well.

    A hidden `.cpu()`, a tensor created without `device=` or `.numpy()` on a device tensor must cost
    a student the same points on a laptop as on a GPU server; without an accelerator only the
    simulation can show them. Named kinds ("cpu", "cpu,cuda") are taken as they are.
    """
    kinds = resolve_devices(spec)
    if spec.strip().lower() in ("", "auto") and kinds == ["cpu"]:
        kinds.append("fakegpu")
    return kinds


def problem_rows(submission: Submission) -> list[CellResult]:
    """Error rows for a submission that could not be graded: one per test cell, or one if the assignment is unknown."""
    source = assignments().get(submission.assignment)
    cells = autograded_cells(source) if source else [("", 0.0)]
    return [CellResult(submission.student, submission.assignment, gid, 0.0, pts, "error", submission.problem or "")
            for gid, pts in cells]


def worth_a_zygote(submissions: int, workers: int) -> bool:
    """Whether warm kernels pay off: only when some worker grades more than one submission.

    A zygote imports every library the run's notebooks use before its first kernel (~5 s for
    torch alone on a 2-core machine) and saves most of a cold kernel's start on every later one;
    for a single submission per worker a cold kernel, which imports only what the notebook
    reaches, is measured faster.
    """
    return submissions > workers


def blank_submissions() -> list[Submission]:
    """The untouched release notebook of every assignment, as student "blank": it must score 0."""
    return [Submission("blank", name, RELEASE / name / f"{name}.ipynb") for name in assignments()]


def import_in_background(module: str) -> None:
    """Start importing `module` on a thread: the driver is idle while workers grade, and a later
    `import` of it waits for this one instead of starting over. Called once the workers are forked."""
    threading.Thread(target=importlib.import_module, args=(module,), name=f"import {module}", daemon=True).start()


def grade_in_parallel(todo: list[Submission], out: Path, workers: int, limits: Limits, warm_kernels: bool,
                      engine: str, scheduler: str | None, on_graded: Callable[[list[CellResult]], None]
                      ) -> tuple[list[CellResult], list[Timing]]:
    """Grade `todo` on the engine's workers with a progress bar; each result, as it comes, is saved for
    resume.py and handed to `on_graded` (the class gradebook), while the workers go on.

    On Ctrl-C, or when the grading machine fails (InfrastructureError), every worker and kernel is stopped.
    """
    rows: list[CellResult] = []
    timings: list[Timing] = []
    workers = max(1, min(workers, len(todo)))  # an idle worker would only take cores from a kernel's thread pools
    warm_kernels = warm_kernels and worth_a_zygote(len(todo), workers)
    for name, value in kernel_environment(workers).items():  # kernels inherit it; what the TA set wins
        os.environ.setdefault(name, value)
    start_engine = dask_engine if engine == "dask" else local_engine
    extra = {"scheduler": scheduler} if engine == "dask" else {}
    with start_engine(workers, out / "logs", limits, **extra) as pool:
        import_in_background("autograder.class_report")  # matplotlib (~1 s) while the workers grade
        try:
            with tqdm(total=len(todo), unit="submission", desc="grading", file=sys.stderr) as progress:
                # One zygote per worker serves every assignment of the run: it preloads what they import, no more.
                preload = warm.preload_modules(*(assignments()[a] for a in sorted({s.assignment for s in todo})))
                futures = {pool.submit(grade_submission, s, out, limits, warm_kernels, preload): s for s in todo}
                for future in pool.as_completed(futures):
                    s = futures[future]
                    try:
                        graded, timing = future.result()
                    except InfrastructureError:
                        raise
                    except Exception as err:  # the grader itself broke (a worker died): not the student's doing
                        raise InfrastructureError(f"{s.student}/{s.assignment}: grading crashed: "
                                                  f"{type(err).__name__}: {err}") from err
                    timings.append(timing)
                    resume.save(out, s, limits, graded)
                    on_graded(graded)
                    rows.extend(graded)
                    progress.set_postfix_str(f"{s.student}/{s.assignment}")
                    progress.update()
        except KeyboardInterrupt:
            pool.abort()
            kill_descendants()
            print(f"\ninterrupted: results so far are kept in {out}/.done; run the same command to finish",
                  file=sys.stderr)
            raise
        except InfrastructureError:
            pool.abort()
            kill_descendants()
            raise
    return rows, timings


def grade_class(submissions: list[Submission], out: Path, workers: int, limits: Limits = Limits(),
                warm_kernels: bool = True, db_url: str | None = None, engine: str = "local",
                scheduler: str | None = None) -> list[CellResult]:
    """Grade every submission not graded before, `workers` at a time, with a progress bar; write CSVs,
    feedback and the class gradebook (`db_url`, by default OUT/gradebook.db).

    Results of earlier runs are reused while the submission, source and limits are unchanged
    (see resume.py). On Ctrl-C the workers and every kernel are stopped, and the same command resumes.
    Submissions are handed out longest first (schedule.py); a worker's zygote (warm.py) serves
    every assignment. `engine` "dask" grades on a Dask cluster (engines.py): a local one, or the
    one at `scheduler`.
    """
    rows: list[CellResult] = []
    graded: list[CellResult] = []
    timings: list[Timing] = []
    todo = []
    for s in submissions:
        if s.problem is not None:
            rows.extend(problem_rows(s))
        elif (stored := resume.load(out, s, limits)) is not None:
            rows.extend(stored)
        else:
            todo.append(s)
    todo = schedule.longest_first(todo)
    if len(todo) < len(submissions):
        print(f"{len(submissions) - len(todo)} submissions already graded or ungradable; grading {len(todo)}",
              file=sys.stderr)
    with class_gradebook(db_url or class_db_url(out)) as record_scores:
        if todo:
            graded, timings = grade_in_parallel(todo, out, workers, limits, warm_kernels, engine, scheduler,
                                                on_graded=record_scores)
            schedule.remember(timings)
        record_scores(rows)  # the submissions not graded in this run: resumed, or ungradable
        rows.extend(graded)
    shutil.rmtree(out / ".work", ignore_errors=True)
    by_submission: dict[tuple[str, str], list[CellResult]] = {}
    for r in rows:  # one pass: a class of 1,000 has hundreds of thousands of rows
        by_submission.setdefault((r.student_id, r.assignment), []).append(r)
    for (student, assignment), submission_rows in sorted(by_submission.items()):
        write_feedback(out, student, assignment, submission_rows)
    write_csvs(out, rows)
    if timings:
        write_timings(out, timings)
    from .class_report import build_report  # matplotlib: imported while grading (above), not at every start

    build_report(out)
    lay_out_course(out, submissions)
    return rows


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
    parser.add_argument("--db-url", default=None,
                        help="class gradebook (SQLAlchemy URL, e.g. postgresql://...); default: sqlite in OUT")
    args = parser.parse_args(argv)
    limits = Limits(cell_timeout=args.cell_timeout, notebook_timeout=args.notebook_timeout,
                    memory_bytes=int(args.memory_gb * 2**30))
    if not sys.platform.startswith("linux"):
        print("WARNING: memory limits and clean-up of left-over processes need Linux; grading without them",
              file=sys.stderr)
    if sandbox.unavailable_reason():
        print(f"WARNING: student code will run WITHOUT isolation (it can read the class's files and use the "
              f"network): {sandbox.unavailable_reason()}", file=sys.stderr)
    try:  # kernels inherit the environment: every test cell visits exactly these kinds
        os.environ[DEVICES_ENV] = ",".join(grading_devices(args.devices))
    except ValueError as err:
        print(f"error: --devices: {err}", file=sys.stderr)
        return 2
    only = {a for a in args.assignments.split(",") if a}
    unknown = only - set(assignments())
    if unknown:
        print(f"error: unknown assignments {sorted(unknown)}; known: {sorted(assignments())}", file=sys.stderr)
        return 2

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
        rows = grade_class(submissions, args.out.resolve(), args.workers, limits,
                           warm_kernels=not args.cold_kernels, db_url=args.db_url, engine=args.engine,
                           scheduler=args.scheduler)
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


if __name__ == "__main__":
    sys.exit(main())
