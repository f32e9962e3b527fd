"""make gpu-check's pieces that run anywhere: it refuses without a GPU, reads notebook 01, judges rows."""

from __future__ import annotations

import subprocess
import sys

import pytest
from nbformat.v4 import new_code_cell, new_notebook, new_output

from autograder.authoring.samples import expected_failures, expected_failures_on
from autograder.grading.report import failing_tests
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
    assert failing_tests(rows) == {("s", "a"): {"t1"}}


def test_a_cuda_table_overrides_the_default_expectation_only_for_its_students():
    default, on_cuda = expected_failures(), expected_failures_on("cuda")
    assert set(default) == set(on_cuda)
    for assignment, per in default.items():
        assert set(per) <= set(on_cuda[assignment])


def test_the_torch_notebooks_are_the_ones_checked():
    names = gpu_check.torch_assignments()
    assert {"01_tensors", "03_autograd", "04_modules", "07_deployment", "08_data_parallel"} <= set(names)
    assert "06_tf_function" not in names and "08_data_parallel" in names


def test_without_tensorflow_leaves_out_its_cells_and_the_rest_runs(tmp_path):
    """The GPU machine has no TensorFlow: 08's torch cells (its DDP ranks) must still run there."""
    from nbclient import NotebookClient

    setup = new_code_cell("import tensorflow as tf\nimport keras\nimport dlkit\n"
                          "tf.config.set_logical_device_configuration(tf.config.list_physical_devices('CPU')[0],"
                          " [tf.config.LogicalDeviceConfiguration()] * 2)\n"
                          "dlkit.seed_everything(0)\nprint(tf.__version__, tf.config.list_logical_devices('CPU'))")
    setup.metadata["nbgrader"] = {"grade_id": "setup"}
    later = new_code_cell("import sys\nimport matplotlib.cbook\n"
                          "assert not [m for m in sys.modules if m.startswith(('tensorfl', 'kera'))]\n"
                          "assert matplotlib.cbook._unpack_to_numpy([1.0, 2.0]) == [1.0, 2.0]\n"
                          "dlkit.seed_everything(1)\nprint('torch part ran')")
    nb = new_notebook(cells=[setup, new_code_cell("strategy = tf.distribute.MirroredStrategy()"), later])
    assert gpu_check.without_tensorflow(nb) == 1
    assert [c.source for c in nb.cells][1] == setup.source and len(nb.cells) == 4
    NotebookClient(nb, timeout=60, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert "torch part ran" in nb.cells[-1].outputs[0]["text"]


def test_only_notebooks_with_tests_on_each_device_need_cuda_in_the_reference_row():
    assert gpu_check.uses_devices("01_tensors") and gpu_check.uses_devices("08_data_parallel")
    assert not gpu_check.uses_devices("02_backprop")


def test_without_tensorflow_only_the_notebooks_mostly_about_torch_run(monkeypatch):
    monkeypatch.setattr(gpu_check, "has_tensorflow", lambda: False)
    names = gpu_check.torch_assignments()
    assert "08_data_parallel" in names and "05_tf1_vs_tf2" not in names and "06_tf_function" not in names
    assert "08_data_parallel" not in gpu_check.gradable(list(names)) and "01_tensors" in gpu_check.gradable(list(names))
