"""Warm kernels: forked from a zygote that imported the libraries once, yet each submission runs fresh."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.authoring.samples import SUBMISSIONS
from autograder.course import assignments
from autograder.execution import warm
from autograder.paths import REPO

from .conftest import read_csv

pytestmark = pytest.mark.pipeline


def grade(class_dir: Path, out: Path, *flags: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--workers", "1",
                           "--assignments", "01_tensors", "--cell-timeout", "45", *flags],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def scores_by_test(out: Path) -> dict[tuple[str, str], str]:
    return {(r["student_id"], r["grade_id"]): r["status"] for r in read_csv(out / "results.csv")}


def test_preload_modules_are_the_notebooks_top_level_imports():
    modules = warm.preload_modules(assignments()["01_tensors"])
    assert {"torch", "numpy", "dlkit", "ipykernel.kernelapp"} <= set(modules)
    assert "tensorflow" not in modules
    assert "torch._dynamo" in modules and "onnxscript" not in modules, "what torch, not ONNX, imports on first use"
    assert "tensorflow" in warm.preload_modules(assignments()["05_tf1_vs_tf2"])
    whole_class = warm.preload_modules(assignments()["01_tensors"], assignments()["05_tf1_vs_tf2"])
    assert set(modules) | {"tensorflow"} <= set(whole_class), "one zygote serves every assignment of the class"


def test_a_submission_cannot_reach_the_next_one_through_a_warm_kernel(release, tmp_path):
    """One worker grades a polluter, then two wrong submissions its pollution would have rescued.

    The polluter patches numpy/torch/dlkit in memory, leaves an IPython startup file in its home
    that would make every later matmul_flops correct, and drops a dlkit.py in its working and
    temp folders. Graded after it by the same worker (same zygote), each victim loses exactly
    the points of its own mistake.
    """
    class_dir = tmp_path / "class"
    for student, sample in [("a_polluter", "hostile_pollutes_next"), ("b_victim_fma", "buggy_fma"),
                            ("c_victim_flip", "buggy_kernel_flip")]:
        shutil.copytree(SUBMISSIONS / sample, class_dir / student)
    out = tmp_path / "out"
    grade(class_dir, out)
    failed = {key for key, status in scores_by_test(out).items() if status != "passed"}
    # The polluter's in-memory patches void its own next test (dlkit.integrity), nothing of the victims'.
    assert failed == {("a_polluter", "test_matmul_flops"), ("b_victim_fma", "test_matmul_flops"),
                      ("c_victim_flip", "test_conv_matches_torch")}
    polluter = nbformat.read(out / "autograded" / "a_polluter" / "01_tensors" / "01_tensors.ipynb", 4)
    assert not any(o.get("output_type") == "error" and o.get("ename") != "TamperingDetected"
                   for c in polluter.cells for o in c.get("outputs", [])), \
        "the polluter's own code should have run without errors (else the test proves nothing)"
    workers = "".join(p.read_text(errors="replace") for p in (out / "logs").glob("worker-*.log"))
    assert "cold kernel" not in workers, "kernels were not forked from the zygote"
    preloaded = next(line for line in workers.splitlines() if line.startswith("warm kernels: a zygote preloaded"))
    assert "torch" in preloaded.split() and "tensorflow" not in preloaded.split(), \
        "a run of 01 alone preloads what 01 imports, not TensorFlow for the other assignments"


def test_warm_and_cold_kernels_grade_alike(release, tmp_path):
    class_dir = tmp_path / "class"
    for sample in ["reference", "buggy_numpy_grad", "hostile_kills_kernel", "hostile_leaves_process"]:
        shutil.copytree(SUBMISSIONS / sample, class_dir / sample)
    grade(class_dir, tmp_path / "warm")
    grade(class_dir, tmp_path / "cold", "--cold-kernels")
    assert scores_by_test(tmp_path / "warm") == scores_by_test(tmp_path / "cold")
