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
from autograder.grading import recover
from autograder.grading.intake import Submission, read_notebook_bytes
from autograder.grading.preprocessors import INFRASTRUCTURE
from autograder.isolation import sandbox
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


def run_autograde(workspace: Workspace, limits: Limits, allow_unsandboxed: bool = False) -> tuple[bool, str]:
    """nbgrader autograde in `workspace` under `limits`; returns (success, nbgrader's log and any traceback).

    Where the system allows, the kernel runs sandboxed (see autograder/isolation/sandbox.py): it sees
    the interpreter, the helper package and a private scratch, nothing of the class, the outputs or
    the kit's instructor files. (Where it does not, the command refused to start unless the TA
    accepted running student code unsandboxed.) Whatever the submission started is killed before
    this returns.
    """
    if sandbox.unavailable_reason() is not None and not allow_unsandboxed:  # a Dask worker on another machine
        return False, (f"{INFRASTRUCTURE}: no sandbox for student code on {os.uname().nodename}: "
                       f"{sandbox.unavailable_reason()}")
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
    try:
        result = capture_log(app)
    finally:
        warm.kill_kernels()  # a forked kernel and what it left, below its keeper
        kill_descendants(spare=warm.spared())  # a cold kernel and what it left; a zygote serves the next submission
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    return bool(result["success"]), result.get("log", "") + result.get("error", "")


def infrastructure_failure(log: str) -> str | None:
    """Why the grading machine (not the submission) failed, from an autograde log; None if it did not.

    GuardedExecute raises KernelStartFailure when the kernel cannot start or fails before any
    student code ran; nbgrader logs the traceback, whose last line names it.
    """
    lines = [line.strip() for line in log.splitlines() if line.strip().startswith(f"{INFRASTRUCTURE}:")
             or f".{INFRASTRUCTURE}: " in line]
    if not lines:
        return None
    return lines[-1].split(f"{INFRASTRUCTURE}: ", 1)[1]
