"""The per-notebook time budget: cells past it are reported, not run, and grading goes on."""

from __future__ import annotations

import pytest

from tests.pipeline.grader import copy_samples, run_grader

pytestmark = pytest.mark.pipeline


def test_cells_past_the_notebook_budget_are_timeouts_and_the_rest_is_kept(release, tmp_path):
    # A warm kernel runs the whole reference notebook in about 2 s, so a budget test needs a slow one:
    # this sample's matmul_flops loops forever (the first test); nothing after it may run.
    class_dir = copy_samples(tmp_path / "class", [("hostile_infinite_loop", "01_tensors")])
    graded = run_grader(class_dir, tmp_path / "out", "--notebook-timeout", "3", workers=1)
    rows = graded.rows("hostile_infinite_loop")
    assert len(rows) == 10, "every test cell still gets a row"
    assert rows["test_matmul_flops"]["status"] == "timeout"
    last = rows["test_maxpool"]
    assert last["status"] == "timeout" and "ran past its 3 s limit" in last["message"], last
