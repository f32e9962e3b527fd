"""A failure of the grading machine is never a student's zero: retried once cold, then the run stops."""

from __future__ import annotations

import json
import os
import sys

import pytest

from tests.pipeline.grader import copy_samples, run_grader

pytestmark = pytest.mark.pipeline


def test_a_kernel_that_cannot_start_stops_the_run_and_records_no_grade(tmp_path):
    """A broken kernel install (its kernelspec runs a command that exits at once) fails every start."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-c", "import sys; sys.exit(3)", "-f", "{connection_file}"],
        "display_name": "Python 3 (broken install)", "language": "python"}))
    class_dir = copy_samples(tmp_path / "class", [("reference", "01_tensors", "alice")])
    out = tmp_path / "out"
    env = dict(os.environ, JUPYTER_PATH=str(tmp_path / "jupyter"))
    graded = run_grader(class_dir, out, "--cold-kernels", "--assignments", "01_tensors", workers=1,
                        expect_status=3, env=env)
    assert "grading stopped because the grading machine failed, not a student" in graded.stderr
    assert "alice/01_tensors: the kernel did not start" in graded.stderr
    assert "and again with a cold kernel" in graded.stderr
    worker_logs = "".join(p.read_text() for p in (out / "logs").glob("worker-*.log"))
    assert "retrying once with a cold kernel" in worker_logs
    assert not (out / "grades.csv").exists() and not (out / "results.csv").exists()
    assert not (out / ".done").exists() or not any((out / ".done").iterdir()), "nothing stored for a resume"
