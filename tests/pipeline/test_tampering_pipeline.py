"""Grade the tampering samples for real (in the compact class): no attack on the checks keeps a wrong answer's points.

Before dlkit.integrity checked broadly, each of these samples scored full marks with wrong answers
(measured when they were written: see the commit that added them). 01's tests now run in the judge
(autograder/judge/): the comparisons happen in the grader's process, where the patches, threads and
fake random generators of these submissions cannot reach. Each must lose exactly the tests in
autograder/expected/01_tensors.toml, with the failure its wrong answer causes (never a `tampered`
row: there is nothing left to tamper with), and a correct submission that patches everything keeps
full marks.
"""

from __future__ import annotations

import pytest

from autograder.authoring.samples import expected_failures
from tests.pipeline.compact_class import FILTER

pytestmark = [pytest.mark.pipeline, pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the graded class")]

#: sample -> {test: what its failure message must say}: the wrong answer's own symptom.
ATTACKS = {
    "hostile_patches_tensor": {"test_pairwise_values": "pairwise_sq_dists"},
    "hostile_repatch_thread": {"test_peak_flops": "FLOP/s"},
    "hostile_repatch_thread_flicker": {"test_peak_flops": "FLOP/s"},
    "hostile_degenerate_rng": {"test_maxpool": "maxpool2d"},
    "hostile_patches_checks": {"test_peak_flops": ""},
}


@pytest.mark.parametrize("student", ATTACKS)
def test_an_attack_on_the_checks_gains_nothing(graded, student):
    rows = graded.rows(student)
    failing = expected_failures()["01_tensors"][student]
    assert sorted(g for g, r in rows.items() if r["status"] != "passed") == sorted(failing), \
        {g: (r["status"], r["message"]) for g, r in rows.items()}
    for grade_id, says in ATTACKS[student].items():
        row = rows[grade_id]
        assert row["status"] in ("failed", "error") and float(row["score"]) == 0, row
        assert says in row["message"], row
    assert not any(r["status"] == "tampered" for r in rows.values()), rows
