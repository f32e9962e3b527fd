"""The grading pipeline for a whole class, in its order: vetted submissions in, OUT's files out.

grade_class: resume what was graded before (resume.py) -> schedule the rest longest first
(schedule.py) -> grade them on an engine's workers (engines.py), each submission by
grade_submission: workspace and nbgrader autograde (autograde.py) -> rows (results.py) -> the
class gradebook as results arrive (gradebook.py) -> per-student feedback (feedback.py) -> CSVs,
timings and the class report (report.py, class_report.py). The command line around it is
autograder/grade.py; every setting arrives as one GradingOptions (autograder/options.py).
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, Future, as_completed
from contextlib import contextmanager
from pathlib import Path

from tqdm.auto import tqdm

from autograder.course import assignments
from autograder.execution import warm
from autograder.grading import interrupt, resume, schedule
from autograder.grading.autograde import Autograded, Workspace, prepare_workspace, run_autograde
from autograder.grading.engines import dask_engine, local_engine, spare_cpu_process
from autograder.grading.feedback import write_feedback
from autograder.grading.gradebook import class_db_url, class_gradebook, lay_out_course
from autograder.grading.intake import Submission
from autograder.grading.report import Timing, in_csv_order, write_csvs, write_timings
from autograder.grading.results import CellResult, autograded_cells, collect, execution_seconds
from autograder.isolation.limits import kill_descendants, process_rlimits
from autograder.judge import session as judge_session
from autograder.options import GradingOptions
from autograder.paths import BUILD, RELEASE


class InfrastructureError(RuntimeError):
    """The grading machine failed on a submission twice (its kernel could not start): the run stops."""


def grade_submission(submission: Submission, options: GradingOptions, preload: tuple[str, ...] = (),
                     warm_kernels: bool | None = None, zygote: str | None = None) -> tuple[list[CellResult], Timing]:
    """Autograde one vetted submission (runs in a worker process); return its rows and where the time went.

    With warm kernels (`warm_kernels`, by default the options'), the kernel is forked from a zygote
    (autograder/execution/warm.py): the run's, at the address `zygote`, or else one of this worker's own,
    which imports `preload` (the libraries of the run's assignments) once for all the worker's submissions.
    A kernel that cannot start, or fails before any student code ran, is the machine's fault:
    the submission is graded once more with a cold kernel, and if that fails too,
    InfrastructureError stops the run rather than give the student a zero.
    """
    started = time.perf_counter()
    out = options.out
    # started, not waited for: a zygote that fails to start means a cold kernel (warm.py)
    if options.warm_kernels if warm_kernels is None else warm_kernels:
        needs = warm.preload_modules(assignments()[submission.assignment], devices=options.devices)
        warm.activate(preload or needs, address=zygote, rlimits=process_rlimits(options.limits), needs=needs)
    workspace, graded = _autograde_once(submission, options)
    if (reason := graded.machine_failure) is not None:
        print(f"WARNING: {submission.student}/{submission.assignment}: {reason}; retrying once with a cold kernel",
              file=sys.stderr)
        shutil.rmtree(workspace.root, ignore_errors=True)
        with warm.suspended():
            workspace, graded = _autograde_once(submission, options)
        if (reason := graded.machine_failure) is not None:
            shutil.rmtree(workspace.root, ignore_errors=True)
            raise InfrastructureError(f"{submission.student}/{submission.assignment}: {reason} "
                                      "(and again with a cold kernel)")
    source = workspace.root / "source" / submission.assignment / f"{submission.assignment}.ipynb"
    rows = collect(workspace, source, graded.success, graded.log, options.devices)
    executing = 0.0
    if workspace.autograded_notebook.exists():
        executing = execution_seconds(workspace.autograded_notebook)
        keep = out / "autograded" / submission.student / submission.assignment
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy2(workspace.autograded_notebook, keep)
    if not graded.success:
        (out / "logs").mkdir(exist_ok=True)
        (out / "logs" / f"{submission.student}--{submission.assignment}.log").write_text(graded.log, encoding="utf-8")
    shutil.rmtree(workspace.root, ignore_errors=True)
    return rows, Timing(submission.student, submission.assignment, time.perf_counter() - started, executing)


def _autograde_once(submission: Submission, options: GradingOptions) -> tuple[Workspace, Autograded]:
    """One nbgrader autograde of `submission` in a fresh workspace."""
    workspace = prepare_workspace(submission, BUILD, options.out / ".work")
    return workspace, run_autograde(workspace, options.limits, options.allow_unsandboxed)


def problem_rows(submission: Submission) -> list[CellResult]:
    """Error rows for a submission that could not be graded: one per test cell, or one if the assignment is unknown."""
    source = assignments().get(submission.assignment)
    cells = autograded_cells(source) if source else [("", 0.0)]
    return [CellResult(submission.student, submission.assignment, gid, 0.0, pts, "error", submission.problem or "")
            for gid, pts in cells]


def worth_a_zygote(submissions: int, workers: int, engine: str = "local") -> bool:
    """Whether warm kernels pay off.

    The run's own zygote (local workers) is started by the command before its own imports, so what the
    first kernels import overlaps the command's start: faster even for one submission (01's reference:
    4.0-4.8 s against 6.0-6.9 s with a cold kernel, measured side by side). A Dask worker starts its zygote
    with its first submission, which then waits for all of it: there it pays off only where some worker
    grades more than one submission, and otherwise a cold kernel, which imports only what the notebook
    reaches, is faster.
    """
    return submissions > 0 if engine == "local" else submissions > workers


def blank_submissions() -> list[Submission]:
    """The untouched release notebook of every assignment, as student "blank": it must score 0."""
    return [Submission("blank", name, RELEASE / name / f"{name}.ipynb") for name in assignments()]


@contextmanager
def zygote_closed(zygote: warm.Zygote | None) -> Iterator[None]:
    """Within the block the run's zygote serves the workers; after it, it is stopped."""
    try:
        yield
    finally:
        if zygote is not None:
            zygote.close()


def grade_in_parallel(todo: list[Submission], options: GradingOptions,
                      on_graded: Callable[[list[CellResult], Timing], None], zygote: warm.Zygote | None = None
                      ) -> tuple[list[CellResult], list[Timing]]:
    """Grade `todo` on the engine's workers with a progress bar; each result, as it comes, is saved for
    resume.py and handed to `on_graded` (the class gradebook, the class report), while the workers go on.

    Warm kernels fork from `zygote` (started early by the command, which closes it) where it preloads what
    this run needs; otherwise from a zygote started here, or they start cold.

    On Ctrl-C, or when the grading machine fails (InfrastructureError), every worker and kernel is stopped.
    """
    rows: list[CellResult] = []
    timings: list[Timing] = []
    out = options.out
    # an idle worker would only take cores from a kernel's thread pools
    workers = max(1, min(options.workers, len(todo)))
    warm_kernels = options.warm_kernels and worth_a_zygote(len(todo), workers, options.engine)
    kernel_env = options.kernel_environment(workers)
    if warm_kernels:
        todo = schedule.warm_start_order(todo, workers, options.devices)
    # One zygote serves every assignment of the run: it imports what they import, no more, in the order they come.
    preload, plan = schedule.zygote_imports(todo, workers, options.devices)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    # Local workers share one, started before they are forked; a Dask worker (another machine?) starts its own.
    shared = warm_kernels and options.engine == "local"
    if zygote is not None and not (shared and set(preload) <= set(zygote.modules) and zygote.env == kernel_env):
        zygote.close()
        zygote = None
    if shared and zygote is None:
        zygote = warm.start(preload, kernel_env, out / "logs" / "zygote.log", process_rlimits(options.limits), plan)
    if zygote is not None:
        try:
            zygote.wait_listening()  # the workers reach it by address alone
        except OSError as err:
            print(f"WARNING: cold kernels: the zygote could not start: {err}", file=sys.stderr)
            zygote.close()
            zygote = None
    if options.engine == "local":  # what the judge needs, imported once here while the zygote imports on another core
        judge_session.preload(set(preload))
    if options.engine == "dask":
        engine = dask_engine(workers, out / "logs", options.limits, kernel_env, options.scheduler)
    else:
        engine = local_engine(workers, out / "logs", options.limits, kernel_env)
    with engine as pool, zygote_closed(zygote):
        try:
            with tqdm(total=len(todo), unit="submission", desc="grading", file=sys.stderr) as progress:
                address = zygote.address if zygote else None
                futures = {pool.submit(grade_submission, s, options, preload, warm_kernels, address): s for s in todo}
                for future in as_completed(futures):
                    if interrupt.requested():  # its KeyboardInterrupt may have been swallowed (interrupt.py)
                        raise KeyboardInterrupt
                    s = futures[future]
                    try:
                        graded, timing = future.result()
                    except InfrastructureError:
                        raise
                    except Exception as err:  # the grader itself broke (a worker died): not the student's doing
                        raise InfrastructureError(f"{s.student}/{s.assignment}: grading crashed: "
                                                  f"{type(err).__name__}: {err}") from err
                    timings.append(timing)
                    resume.save(s, options, graded)
                    on_graded(graded, timing)
                    rows.extend(graded)
                    progress.set_postfix_str(f"{s.student}/{s.assignment}")
                    progress.update()
        except KeyboardInterrupt:
            pool.shutdown(wait=False, cancel_futures=True)
            kill_descendants()
            print(f"\ninterrupted: results so far are kept in {out}/.done; run the same command to finish",
                  file=sys.stderr)
            raise
        except InfrastructureError:
            pool.shutdown(wait=False, cancel_futures=True)
            kill_descendants()
            raise
    return rows, timings


class ReportSections:
    """The class report's sections, each built as soon as the last submission of its assignment is graded.

    Rendering a section's figures takes ~0.1-0.3 s; done at the end of a run, when all workers but one
    are idle, it kept the whole run waiting (2.7 s of a 109 s run of 24 submissions, measured). Built
    while the workers go on, from the same rows and timings the files will hold, the page is the one
    `python -m autograder.grading.class_report OUT` rebuilds from them. With a `builder` (an executor:
    engines.spare_cpu_process), the sections are built there, on the CPU the kernels leave idle, instead
    of taking it from them.
    """

    def __init__(self, known: list[CellResult], todo: list[Submission], builder: Executor | None = None):
        self.rows: dict[str, list[CellResult]] = {}
        for r in known:
            self.rows.setdefault(r.assignment, []).append(r)
        self.seconds: dict[str, list[float]] = {}
        self.waiting = Counter(s.assignment for s in todo)
        self.builder = builder
        self.building: dict[str, Future] = {}
        self.built: dict[str, str] = {}

    def add(self, rows: list[CellResult], timing: Timing) -> None:
        """One graded submission; builds its assignment's section if it was the last one."""
        name = timing.assignment
        self.rows.setdefault(name, []).extend(rows)
        self.seconds.setdefault(name, []).append(timing.seconds)
        self.waiting[name] -= 1
        if self.waiting[name] == 0:
            args = (name, in_csv_order(self.rows[name]), self.seconds[name])
            if self.builder is not None:
                self.building[name] = self.builder.submit(_section, *args)
                return
            try:
                self.built[name] = _section(*args)
            except Exception as err:  # noqa: BLE001 - built again at the end, once the grades are written
                _section_failed(name, err)

    def collect(self) -> None:
        """Wait for the sections being built (while the builder runs); one that failed is built again by write()."""
        for name, future in self.building.items():
            try:
                self.built[name] = future.result()
            except Exception as err:  # noqa: BLE001 - built again at the end, once the grades are written
                _section_failed(name, err)
        self.building = {}

    def write(self, out: Path, rows: list[CellResult]) -> Path:
        """OUT/report.html of the whole class (`rows`), building the sections not built yet; with no timings
        from this run (all resumed), those OUT/timings.csv still holds, as a rebuild would read them."""
        from autograder.grading.class_report import read_timings, write_report

        self.collect()
        return write_report(out, in_csv_order(rows), self.seconds or read_timings(out), self.built)


def _section(name: str, rows: list[CellResult], seconds: list[float]) -> str:
    from autograder.grading.class_report import assignment_section  # matplotlib: imported while grading

    return assignment_section(name, rows, seconds)


def _warm_up_report() -> None:
    from autograder.grading.class_report import warm_up

    warm_up()


def _section_failed(name: str, err: Exception) -> None:
    print(f"WARNING: the class report's {name} section: {type(err).__name__}: {err}", file=sys.stderr)


def grade_class(submissions: list[Submission], options: GradingOptions, zygote: warm.Zygote | None = None
                ) -> list[CellResult]:
    """Grade every submission not graded before, `options.workers` at a time, with a progress bar; write
    CSVs, feedback and the class gradebook (`options.db_url`, by default OUT/gradebook.db).

    Results of earlier runs are reused while the submission, source and limits are unchanged
    (see resume.py). On Ctrl-C the workers and every kernel are stopped, and the same command resumes.
    Submissions are handed out longest first (schedule.py); the run's zygote (warm.py) serves every
    assignment (`zygote`, if the command started it already). Engine "dask" grades on a Dask cluster
    (engines.py): a local one, or the one at `options.scheduler`.
    """
    rows: list[CellResult] = []
    graded: list[CellResult] = []
    timings: list[Timing] = []
    todo = []
    for s in submissions:
        if s.problem is not None:
            rows.extend(problem_rows(s))
        elif (stored := resume.load(s, options)) is not None:
            rows.extend(stored)
        else:
            todo.append(s)
    todo = schedule.longest_first(todo, options.out)
    if len(todo) < len(submissions):
        print(f"{len(submissions) - len(todo)} submissions already graded or ungradable; grading {len(todo)}",
              file=sys.stderr)
    out = options.out
    with class_gradebook(options.db_url or class_db_url(out)) as record_scores, spare_cpu_process() as builder:
        if todo:  # at the start of a run the zygote's imports leave a core idle
            builder.submit(_warm_up_report)
        sections = ReportSections(rows, todo, builder)
        if todo:
            def on_graded(submission_rows: list[CellResult], timing: Timing) -> None:
                record_scores(submission_rows)
                sections.add(submission_rows, timing)

            graded, timings = grade_in_parallel(todo, options, on_graded, zygote)
        record_scores(rows)  # the submissions not graded in this run: resumed, or ungradable
        rows.extend(graded)
        sections.collect()  # before the builder stops
    shutil.rmtree(out / ".work", ignore_errors=True)
    by_submission: dict[tuple[str, str], list[CellResult]] = {}
    for r in rows:  # one pass: a class of 1,000 has hundreds of thousands of rows
        by_submission.setdefault((r.student_id, r.assignment), []).append(r)
    for (student, assignment), submission_rows in sorted(by_submission.items()):
        write_feedback(out, student, assignment, submission_rows)
    write_csvs(out, rows)
    if timings:
        write_timings(out, timings)
    sections.write(out, rows)
    lay_out_course(out, submissions)
    return rows
