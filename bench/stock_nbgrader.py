"""Grade a class the way a course without the kit would: stock `nbgrader autograde`, one submission at a time.

This is the baseline the kit is measured and checked against: nbgrader's own command line, its
default preprocessors, a plain (unsandboxed) kernel started afresh for every submission, and
only the settings any course needs (course id, cell timeout).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from nbgrader.api import Gradebook

from autograder.grading.intake import Submission
from autograder.grading.report import read_results
from autograder.paths import BUILD

STOCK_CONFIG = """c = get_config()  # noqa: F821
c.CourseDirectory.course_id = "dl-hwsw"
c.Execute.timeout = {cell_timeout}
"""


def lay_out(submissions: list[Submission], root: Path, cell_timeout: int) -> None:
    """An nbgrader course directory with the released assignments' sources, gradebook and the submissions."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for assignment in sorted({s.assignment for s in submissions}):
        shutil.copytree(BUILD / "source" / assignment, root / "source" / assignment)
    shutil.copy2(BUILD / "gradebook.db", root / "gradebook.db")
    for s in submissions:
        target = root / "submitted" / s.student / s.assignment
        target.mkdir(parents=True)
        shutil.copyfile(s.notebook, target / f"{s.assignment}.ipynb")
    (root / "nbgrader_config.py").write_text(STOCK_CONFIG.format(cell_timeout=cell_timeout))


def autograde(root: Path, assignment: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    """`nbgrader autograde ASSIGNMENT` in the course directory `root`, as a TA would type it."""
    nbgrader = Path(sys.executable).with_name("nbgrader")
    env = dict(os.environ, PATH=f"{nbgrader.parent}{os.pathsep}{os.environ.get('PATH', '')}", MPLBACKEND="Agg")
    return subprocess.run([str(nbgrader), "autograde", assignment, "--force"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=timeout)


def scores(root: Path) -> dict[tuple[str, str, str], float]:
    """(student, assignment, grade_id) -> auto score, from the course's gradebook."""
    found = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for assignment in gb.assignments:
            for submission in assignment.submissions:
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        found[(submission.student.id, assignment.name, grade.name)] = float(grade.score or 0.0)
    return found


def grade_with_stock_nbgrader(submissions: list[Submission], root: Path, cell_timeout: int = 120
                              ) -> dict[tuple[str, str, str], float]:
    """Grade `submissions` sequentially with stock nbgrader in `root`; return every test cell's score."""
    lay_out(submissions, root, cell_timeout)
    for assignment in sorted({s.assignment for s in submissions}):
        proc = autograde(root, assignment)
        if proc.returncode != 0:
            raise RuntimeError(f"nbgrader autograde {assignment} failed:\n{proc.stdout}{proc.stderr}")
    return scores(root)


def _wrote_to_stderr_only(cell) -> bool:
    outputs = cell.get("outputs", [])
    return (any(o.get("output_type") == "stream" and o.get("name") == "stderr" for o in outputs)
            and not any(o.get("output_type") == "error" for o in outputs))


def failed_off_the_cpu(kit_out: Path) -> set[tuple[str, str, str]]:
    """(student, assignment, grade_id) of the tests the kit failed on an accelerator row, real or simulated
    (fakegpu), while their CPU row passed: stock nbgrader runs every test once, on the CPU."""
    by_test: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in read_results(kit_out):
        by_test.setdefault((r.student_id, r.assignment, r.grade_id), {})[r.device] = r.status
    return {key for key, statuses in by_test.items()
            if statuses.get("cpu") == "passed" and any(s == "failed" for d, s in statuses.items() if d != "cpu")}


def unexplained_differences(root: Path, stock: dict[tuple[str, str, str], float],
                            kit: dict[tuple[str, str, str], float],
                            off_cpu: set[tuple[str, str, str]] = frozenset()) -> list[str]:
    """Test cells whose kit score differs from stock nbgrader's for any reason but the documented ones.

    The deliberate differences: nbgrader gives 0 to a passing test cell that wrote to stderr
    (a DeprecationWarning, TensorFlow's logging), the kit keeps its points; and the kit also runs
    device-checked tests on the accelerators it has or simulates, so a device bug the CPU cannot
    show (`off_cpu`, see failed_off_the_cpu) costs points with the kit only.
    """
    problems = [f"{key}: graded by only one of them" for key in sorted(set(stock) ^ set(kit))]
    for key in sorted(k for k in set(stock) & set(kit)
                      if stock[k] != kit[k] and not (k in off_cpu and kit[k] < stock[k])):
        student, assignment, grade_id = key
        graded = nbformat.read(root / "autograded" / student / assignment / f"{assignment}.ipynb", as_version=4)
        cell = next((c for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id), {})
        if not (stock[key] == 0 and _wrote_to_stderr_only(cell)):
            problems.append(f"{key}: stock nbgrader {stock[key]:g}, kit {kit[key]:g}")
    return problems
