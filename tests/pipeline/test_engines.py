"""The same grading on a Dask cluster: a local multi-worker cluster here, a real one by address elsewhere."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from autograder.authoring.samples import SUBMISSIONS
from autograder.paths import REPO
from bench.stock_nbgrader import scores

from .conftest import read_csv

pytestmark = pytest.mark.pipeline


def test_a_local_dask_cluster_grades_the_class_like_the_local_pool(release, tmp_path):
    class_dir = tmp_path / "class"
    for student in ["reference", "buggy_fma", "buggy_pool_zero", "hostile_kills_kernel"]:
        shutil.copytree(SUBMISSIONS / student / "01_tensors", class_dir / student / "01_tensors")
    outs = {}
    for engine in ("dask", "local"):
        outs[engine] = tmp_path / engine
        proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(outs[engine]),
                               "--workers", "2", "--assignments", "01_tensors", "--cell-timeout", "45",
                               "--engine", engine], cwd=REPO, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr
    def outcomes(engine: str) -> list[tuple]:  # messages quote random test inputs, so they are left out
        return [(r["student_id"], r["grade_id"], r["score"], r["status"]) for r in read_csv(outs[engine] / "results.csv")]

    assert outcomes("dask") == outcomes("local")
    assert scores(outs["dask"]) == scores(outs["local"])
    totals = {g["student_id"]: float(g["score"]) for g in read_csv(outs["dask"] / "grades.csv")}
    assert totals["reference"] == 12 and totals["buggy_fma"] == 11 and totals["hostile_kills_kernel"] == 2
    assert len(list((outs["dask"] / "logs").glob("worker-*.log"))) == 2, "each Dask worker was prepared once"
