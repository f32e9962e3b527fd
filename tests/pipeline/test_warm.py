"""Warm kernels: forked from a zygote that imported the libraries once, yet each submission runs fresh."""

from __future__ import annotations

import nbformat
import pytest

from tests.pipeline.compact_class import FILTER
from tests.pipeline.grader import copy_samples, run_grader

pytestmark = pytest.mark.pipeline


def test_a_submission_cannot_reach_the_next_one_through_a_warm_kernel(release, tmp_path):
    """One worker grades a polluter, then two wrong submissions its pollution would have rescued.

    The polluter patches numpy/torch/dlkit in memory, leaves an IPython startup file in its home
    that would make every later matmul_flops correct, and drops a dlkit.py in its working and
    temp folders. Graded after it by the same worker (same zygote), each victim loses exactly
    the points of its own mistake.
    """
    class_dir = copy_samples(tmp_path / "class", [("hostile_pollutes_next", "01_tensors", "a_polluter"),
                                                  ("buggy_fma", "01_tensors", "b_victim_fma"),
                                                  ("buggy_kernel_flip", "01_tensors", "c_victim_flip")])
    graded = run_grader(class_dir, tmp_path / "out", "--assignments", "01_tensors", "--cell-timeout", "45", workers=1)
    failed = {(student, gid) for student in ("a_polluter", "b_victim_fma", "c_victim_flip")
              for gid in graded.failed(student)}
    # The polluter's answers are right (its patches reach nothing the judge uses); each victim loses its own mistake.
    assert failed == {("b_victim_fma", "test_matmul_flops"), ("c_victim_flip", "test_conv_matches_torch")}
    polluter = nbformat.read(graded.autograded("a_polluter"), 4)
    assert not any(o.get("output_type") == "error" and o.get("ename") != "TamperingDetected"
                   for c in polluter.cells for o in c.get("outputs", [])), \
        "the polluter's own code should have run without errors (else the test proves nothing)"
    workers = "".join(p.read_text(errors="replace") for p in (graded.out / "logs").glob("worker-*.log"))
    assert "cold kernel" not in workers, "kernels were not forked from the zygote"
    preloaded = next(line for line in workers.splitlines() if line.startswith("warm kernels: a zygote preloaded"))
    assert "torch" in preloaded.split() and "tensorflow" not in preloaded.split(), \
        "a run of 01 alone preloads what 01 imports, not TensorFlow for the other assignments"


#: Graded warm with the compact class, and again here with cold kernels: a failure, a dead kernel, a detached process.
WARM_AND_COLD = ["buggy_numpy_grad", "hostile_kills_kernel", "hostile_leaves_process"]


@pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the graded class")
def test_warm_and_cold_kernels_grade_alike(graded, tmp_path):
    class_dir = copy_samples(tmp_path / "class", [(s, "01_tensors") for s in WARM_AND_COLD])
    cold = run_grader(class_dir, tmp_path / "cold", "--assignments", "01_tensors", "--cell-timeout", "45",
                      "--cold-kernels", workers=2)
    for student in WARM_AND_COLD:
        statuses = {g: r["status"] for g, r in cold.rows(student).items()}
        assert statuses == {g: r["status"] for g, r in graded.rows(student).items()}, student
