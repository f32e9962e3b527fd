"""Every seed is fair: the reference keeps every point whatever seed a student's hidden tests draw.

Runs autograder/verify/seed_sweep.py on notebook 02's loss tests, whose inputs are drawn from the seed (scores
in the thousands, where a float32 expected value is off by more than a float64 tolerance), including the
seed on which the reference once lost test_softmax_stable (expected computed in float32); and shows the
sweep catching exactly that on a copy of the source with the old expected value.
"""

from __future__ import annotations

import subprocess
import sys

from autograder.paths import NOTEBOOKS, REPO

TESTS = "test_softmax_stable,test_softmax_loss,test_svm_loss,test_svm_grad"
ONCE_UNFAIR = "172159096"


def sweep(tests: str, seeds: int, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder.verify.seed_sweep", "02_backprop", "--tests", tests,
                           "--seeds", str(seeds), "--seed", ONCE_UNFAIR, *flags],
                          cwd=REPO, capture_output=True, text=True, timeout=600)


def test_the_reference_keeps_every_point_on_every_seed():
    proc = sweep(TESTS, 30)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "| 02_backprop | 1 | 4 | 31 of 31 | 0 |" in proc.stdout, proc.stdout


def test_the_sweep_finds_an_expected_value_computed_in_lower_precision(tmp_path):
    source = (NOTEBOOKS / "02_backprop.ipynb").read_text()
    old = source.replace("[0.0, 2.0, -1.0]], dtype=torch.float64)", "[0.0, 2.0, -1.0]])")
    assert old != source, "the float64 expected value moved: update this test"
    (tmp_path / "02_backprop.ipynb").write_text(old)
    proc = sweep("test_softmax_stable", 0, "--notebook", str(tmp_path / "02_backprop.ipynb"))
    assert proc.returncode == 1 and f"seed {ONCE_UNFAIR}:" in proc.stdout, proc.stdout[-3000:]
