"""The per-notebook time budget: cells past it are reported, not run, and grading goes on."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from autograder.authoring.samples import SUBMISSIONS
from autograder.paths import REPO

from .conftest import read_csv

pytestmark = pytest.mark.pipeline


def test_cells_past_the_notebook_budget_are_timeouts_and_the_rest_is_kept(release, tmp_path):
    # A warm kernel runs the whole reference notebook in about 2 s, so a budget test needs a slow one:
    # this sample's matmul_flops loops forever (the first test); nothing after it may run.
    shutil.copytree(SUBMISSIONS / "hostile_infinite_loop" / "01_tensors",
                    tmp_path / "class" / "hostile_infinite_loop" / "01_tensors")
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(tmp_path / "class"), str(tmp_path / "out"),
                           "--workers", "1", "--notebook-timeout", "3"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = {r["grade_id"]: r for r in read_csv(tmp_path / "out" / "results.csv")}
    assert len(rows) == 10, "every test cell still gets a row"
    assert rows["test_matmul_flops"]["status"] == "timeout"
    last = rows["test_maxpool"]
    assert last["status"] == "timeout" and "ran past its 3 s limit" in last["message"], last
