"""autograder/authoring/colab_grade.ipynb, the TA's Colab grading notebook, as committed
(tests/pipeline/test_colab_grade.py runs it)."""

from __future__ import annotations

import nbformat

from autograder.authoring import ta_notebook
from autograder.paths import TA_NOTEBOOK


def test_notebook_is_valid_committed_clean_and_names_no_repository():
    nb = nbformat.read(TA_NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert not [c.id for c in nb.cells if c.cell_type == "code" and (c.outputs or c.execution_count)]
    params = ta_notebook.parameters_cell(nb).source
    assert 'KIT_REPO = ""' in params, "the repository is filled in by the release from pyproject.toml, not here"
    text = "".join(c.source for c in nb.cells)
    for step in ("drive.mount", "git\", \"clone", "pip\", \"install", "autograder.grade", "files.download"):
        assert step in text, f"the notebook lost its {step} step"
