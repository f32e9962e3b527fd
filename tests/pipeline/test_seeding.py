"""A regrade is identical: hidden tests draw their random inputs from a seed per student, assignment and test.

The compact class's REGRADED students, graded again on the Dask engine, get byte-identical rows, messages included.
"""

from __future__ import annotations

import pytest

from dlkit.seeding import seed_for
from tests.pipeline.compact_class import FILTER
from tests.pipeline.conftest import REGRADED

pytestmark = [pytest.mark.pipeline, pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the graded class")]


def rows(graded) -> list[dict]:
    return sorted((r for r in graded.results if r["student_id"] in REGRADED and r["assignment"] == "01_tensors"),
                  key=lambda r: (r["student_id"], r["grade_id"], r["device"]))


def totals(run) -> dict[str, dict]:
    return {g["student_id"]: g for g in run.grades if g["student_id"] in REGRADED and g["assignment"] == "01_tensors"}


def test_grading_the_same_class_twice_gives_identical_results(graded, regraded_on_dask):
    assert rows(regraded_on_dask) == rows(graded)
    assert totals(regraded_on_dask) == totals(graded)
    by_student = {r["student_id"]: r for r in rows(graded) if r["grade_id"] == "test_conv_matches_torch"}
    for student in ("seeded_ann", "seeded_bob"):  # both buggy_kernel_flip
        seed = seed_for(student, "01_tensors", "test_conv_matches_torch")
        assert by_student[student]["status"] == "failed"
        assert by_student[student]["message"].endswith(f"[inputs: dlkit.seed_everything({seed})]")
    assert by_student["seeded_ann"]["message"] != by_student["seeded_bob"]["message"], "each student gets own inputs"
    assert "seed_everything" not in by_student["reference"]["message"], "a passed test needs no seed"
