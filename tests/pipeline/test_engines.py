"""The same grading on a Dask cluster: a local multi-worker cluster here, a real one by address elsewhere."""

from __future__ import annotations

import pytest

from bench.stock_nbgrader import scores
from tests.pipeline.compact_class import FILTER
from tests.pipeline.conftest import REGRADED

pytestmark = [pytest.mark.pipeline, pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the graded class")]


def outcomes(graded) -> set[tuple]:
    return {(r["student_id"], r["grade_id"], r["device"], r["score"], r["status"]) for r in graded.results
            if r["student_id"] in REGRADED and r["assignment"] == "01_tensors"}


def test_a_local_dask_cluster_grades_the_class_like_the_local_pool(graded, regraded_on_dask):
    assert outcomes(regraded_on_dask) == outcomes(graded)

    def in_regrade(gradebook: dict) -> dict:
        return {key: score for key, score in gradebook.items() if key[0] in REGRADED and key[1] == "01_tensors"}

    assert scores(regraded_on_dask.out) == in_regrade(scores(graded.out))
    totals = {g["student_id"]: float(g["score"]) for g in regraded_on_dask.grades}
    assert totals["reference"] == 12 and totals["buggy_fma"] == 11 and totals["hostile_kills_kernel"] == 2
    assert len(list((regraded_on_dask.out / "logs").glob("worker-*.log"))) == 2, "each Dask worker was prepared once"
