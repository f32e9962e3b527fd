"""Grade the tampering samples for real (in the compact class): each attack that kept its points now voids its tests.

Before dlkit.integrity checked broadly, each of these samples scored full marks with wrong answers
(measured when they were written: see the commit that added them). Here they must lose exactly the
tests in autograder/expected/01_tensors.toml, with status `tampered` and a message naming what
changed, and the TA must get the summary and OUT/tampered.csv.
"""

from __future__ import annotations

import csv

import pytest

from autograder.authoring.samples import expected_failures
from tests.pipeline.compact_class import FILTER

pytestmark = [pytest.mark.pipeline, pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the graded class")]

#: sample -> {test: what its message must say}; every other expected failure may be plain "failed".
TAMPERED = {
    "hostile_patches_tensor": {"test_pairwise_values": "torch.Tensor.detach was replaced",
                               "test_pairwise_nonnegative": "torch.Tensor.detach was replaced",
                               "test_pairwise_vectorised": "torch.Tensor.detach was replaced"},
    "hostile_repatch_thread": {"test_peak_flops": "started by the submission",
                               "test_conv_matches_torch": "started by the submission"},
    "hostile_repatch_thread_flicker": {"test_peak_flops": "started by the submission",
                                       "test_conv_matches_torch": "started by the submission"},
    "hostile_degenerate_rng": {"test_maxpool": "numpy.random.default_rng was replaced"},
    "hostile_patches_checks": {"test_peak_flops": "math.isclose was replaced"},
}


@pytest.mark.parametrize("student", TAMPERED)
def test_tampering_sample_loses_its_tests_as_tampered(graded, student):
    rows = graded.rows(student)
    failing = expected_failures()["01_tensors"][student]
    assert sorted(g for g, r in rows.items() if r["status"] != "passed") == sorted(failing), \
        {g: (r["status"], r["message"]) for g, r in rows.items()}
    for grade_id, says in TAMPERED[student].items():
        row = rows[grade_id]
        assert row["status"] == "tampered" and float(row["score"]) == 0, row
        assert row["message"].startswith("tampered: ") and says in row["message"], row


def test_the_ta_gets_a_summary_and_a_list(graded):
    assert "TAMPERING:" in graded.stdout
    with open(graded.out / "tampered.csv", newline="", encoding="utf-8") as f:
        listed = {(r["student_id"], r["grade_id"]) for r in csv.DictReader(f)}
    assert {(s, g) for s, tests in TAMPERED.items() for g in tests} <= listed
    feedback = (graded.out / "feedback" / "hostile_degenerate_rng" / "01_tensors" / "feedback.html").read_text()
    assert "tampered" in feedback and "numpy.random.default_rng was replaced" in feedback
