"""Autograde one submission with nbgrader, in a workspace of its own.

Each submission gets a private nbgrader course directory (a copy of the release gradebook,
the instructor source, the submitted notebook). Workers therefore never share a SQLite
gradebook, and the student's original file is only ever read. A submitted notebook that lost its
grading metadata is put there rebuilt from the release (recover.py).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbgrader.converters import Autograde
from nbgrader.coursedir import CourseDirectory
from nbgrader.utils import capture_log

from autograder.course import nbgrader_config
from autograder.execution import warm
from autograder.execution.kernel import cgroup_prefix
from autograder.grading import recover
from autograder.grading.intake import Submission, read_notebook_bytes
from autograder.grading.preprocessors import take_machine_failures
from autograder.isolation import cgroups, sandbox
from autograder.isolation.limits import Limits, kill_descendants


@dataclass(frozen=True)
class Workspace:
    """The nbgrader course directory in which one submission is graded."""

    root: Path
    student: str
    assignment: str

    @property
    def gradebook(self) -> Path:
        return self.root / "gradebook.db"

    @property
    def autograded_notebook(self) -> Path:
        return self.root / "autograded" / self.student / self.assignment / f"{self.assignment}.ipynb"


def prepare_workspace(submission: Submission, release_root: Path, work_root: Path) -> Workspace:
    """Lay out a fresh course directory for `submission` under `work_root`, from the built release."""
    root = work_root / f"{submission.student}--{submission.assignment}"
    if root.exists():
        shutil.rmtree(root)
    name = submission.assignment
    shutil.copytree(release_root / "source" / name, root / "source" / name)
    shutil.copy2(release_root / "gradebook.db", root / "gradebook.db")
    submitted = root / "submitted" / submission.student / name
    submitted.mkdir(parents=True)
    data = read_notebook_bytes(submission.notebook)  # a copy: the original stays untouched
    rebuilt = recover.rebuild_file(data.decode("utf-8"), release_root / "release" / name / f"{name}.ipynb",
                                   root / "source" / name / f"{name}.ipynb")
    if rebuilt is None:
        (submitted / f"{name}.ipynb").write_bytes(data)
    else:  # it lost its grading metadata: its answers, matched by name, in the release (intake vetted it)
        nbformat.write(rebuilt, submitted / f"{name}.ipynb")
    return Workspace(root, submission.student, name)


@dataclass(frozen=True)
class Autograded:
    """What one nbgrader autograde of a submission gave."""

    success: bool
    log: str                      # nbgrader's log and any traceback, for the TA
    machine_failure: str | None   # why the grading machine (not the submission) failed, from the grader's record


def run_autograde(workspace: Workspace, limits: Limits, allow_unsandboxed: bool = False) -> Autograded:
    """nbgrader autograde in `workspace` under `limits`.

    Where the system allows, the kernel runs sandboxed (see autograder/isolation/sandbox.py): it sees
    the interpreter, the helper package and a private scratch, nothing of the class, the outputs or
    the kit's instructor files. (Where it does not, the command refused to start unless the TA
    accepted running student code unsandboxed.) Whatever the submission started is killed before
    this returns.
    """
    if sandbox.unavailable_reason() is not None and not allow_unsandboxed:  # a Dask worker on another machine
        why = f"no sandbox for student code on {os.uname().nodename}: {sandbox.unavailable_reason()}"
        return Autograded(False, why, why)
    config = nbgrader_config(workspace.root, limits)
    config.SandboxedKernelManager.memory_bytes = limits.memory_bytes
    workdir = None
    if sandbox.unavailable_reason() is None:
        workdir = sandbox.make_workdir()
        config.SandboxedKernelManager.sandbox_workdir = str(workdir)
        config.SandboxedKernelManager.sandbox_keep = [str(p) for p in sandbox.default_keep()]
        config.SandboxedKernelManager.sandbox_processes = limits.processes
        config.SandboxedKernelManager.sandbox_scratch_bytes = limits.scratch_bytes
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = workspace.assignment
    coursedir.student_id = workspace.student
    app = Autograde(coursedir=coursedir, config=config)
    app.force = True
    app.create_student = True
    take_machine_failures()  # forget any left from an earlier submission of this worker
    try:
        result = capture_log(app)
    finally:
        warm.kill_kernels()  # a forked kernel and what it left, below its keeper
        kill_descendants(spare=warm.spared())  # a cold kernel and what it left; a zygote serves the next submission
        cgroups.remove_left(cgroup_prefix())  # the kernel's memory group, should its cleanup not have removed it
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    failures = take_machine_failures()
    return Autograded(bool(result["success"]), result.get("log", "") + result.get("error", ""),
                      failures[-1] if failures else None)
