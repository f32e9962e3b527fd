"""make gpu-check's pieces that run anywhere: it refuses without a GPU, reads notebook 01, judges rows."""

from __future__ import annotations

import subprocess
import sys

import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder.authoring.samples import expected_failures, expected_failures_on
from autograder.paths import REPO
from autograder.verify import gpu_check


def test_without_a_cuda_gpu_it_says_so_and_exits_2(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: run `make gpu-check` itself")
    proc = subprocess.run([sys.executable, "-m", "autograder.verify.gpu_check", str(tmp_path / "out")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "no CUDA GPU" in proc.stderr


def test_reads_the_bf16_share_that_notebook_01_prints():
    cell = new_code_cell("...", outputs=[new_output("stream", name="stdout", text=(
        "AMD EPYC, n = 512:\n  fp32:   0.0201 TFLOP/s of 0.2 spec peak = 11%\n  bf16:   0.0012 TFLOP/s\n"
        "NVIDIA H100 80GB HBM3, n = 8192:\n  fp32:     51.2 TFLOP/s of 67 spec peak = 76%\n"
        "  bf16:      774 TFLOP/s of 989 spec peak = 78%\n"))])
    assert gpu_check.bf16_shares(new_notebook(cells=[cell])) == [0.78]


def test_a_test_fails_when_any_device_row_fails_but_not_when_skipped():
    rows = [{"student_id": "s", "assignment": "a", "grade_id": "t1", "status": "passed"},
            {"student_id": "s", "assignment": "a", "grade_id": "t1", "status": "failed"},
            {"student_id": "s", "assignment": "a", "grade_id": "t2", "status": "passed"},
            {"student_id": "s", "assignment": "a", "grade_id": "t2", "status": "skipped"}]
    assert gpu_check.failing_tests(rows) == {("s", "a"): {"t1"}}


def test_a_cuda_table_overrides_the_default_expectation_only_for_its_students():
    default, on_cuda = expected_failures(), expected_failures_on("cuda")
    assert set(default) == set(on_cuda)
    for assignment, per in default.items():
        assert set(per) <= set(on_cuda[assignment])


def test_the_torch_notebooks_are_the_ones_checked():
    names = gpu_check.torch_assignments()
    assert {"01_tensors", "03_autograd", "04_modules", "07_deployment", "08_data_parallel"} <= set(names)
    assert "06_tf_function" not in names
