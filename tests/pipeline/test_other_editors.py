"""A notebook that comes back from another editor still grades exactly like the original.

Students open the release in Colab, VS Code or an older Jupyter, which rewrite cell ids, add
their own metadata, keep outputs and let students add cells. Variants of the reference
submission, made the way those editors save files (tests/pipeline/compact_class.py: VARIANTS),
are graded with the compact class and must score the same on every test cell as the reference.
"""

from __future__ import annotations

import nbformat
import pytest

from autograder.authoring.colab_setup import SETUP_GRADE_ID
from tests.pipeline.compact_class import EDITED, SELECTED, VARIANTS, editor_student, nbgrader, outputs_left_in

pytestmark = [pytest.mark.pipeline, pytest.mark.skipif(EDITED not in SELECTED, reason=f"{EDITED} is not graded")]


def outcomes(graded, student: str) -> dict[str, tuple[str, str, str]]:
    return {gid: (r["score"], r["status"], r["message"]) for gid, r in graded.rows(student, EDITED).items()}


def test_the_reference_scores_full_marks(graded):
    reference = outcomes(graded, "reference")
    assert reference and all(status == "passed" for _, status, _ in reference.values())


@pytest.mark.parametrize("make", VARIANTS, ids=[v.__name__ for v in VARIANTS])
def test_variant_grades_like_the_reference(graded, make):
    assert outcomes(graded, editor_student(make)) == outcomes(graded, "reference")


def test_the_setup_cell_ran_in_the_grader_quietly_and_offline(graded):
    """In the grader's sandbox (no network) dlkit is installed: the setup cell reports and never calls pip."""
    path = graded.autograded(editor_student(outputs_left_in), EDITED)
    cell = next(c for c in nbformat.read(path, as_version=4).cells if nbgrader(c).get("grade_id") == SETUP_GRADE_ID)
    assert not [o for o in cell.outputs if o.output_type == "error"], "the setup cell ran without an error"
    text = "".join(o.get("text", "") for o in cell.outputs)
    assert "devices: CPU" in text and "installing" not in text, text
