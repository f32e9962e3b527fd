"""The TA's Colab grading notebook, as released: authoring/colab_grade.ipynb with the kit's address filled in.

The notebook in autograder/ cannot know where the kit is published (Colab opens it without its
repository), so it ships with KIT_REPO empty. The release step writes a copy into the release
folder, next to the student notebooks, with KIT_REPO (the full kit, `kit` or else `github`) and
KIT_BRANCH taken from `[tool.dlkit.publish]` and an Open-in-Colab link on top: the TA opens that
copy and runs it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
from nbformat.v4 import new_markdown_cell

from autograder.authoring.publish import Publish
from autograder.paths import TA_NOTEBOOK

NAME = "colab_grade.ipynb"


def parameters_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The cell tagged "parameters" (the papermill convention), which a TA edits and tests override."""
    return next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))


def set_parameter(source: str, name: str, value: str) -> str:
    """`source` with the assignment `NAME = ...` at the start of a line given `value` (as a Python literal)."""
    pattern = re.compile(rf"^{name} = (\"[^\"]*\"|'[^']*')", re.MULTILINE)
    if not pattern.search(source):
        raise ValueError(f"the parameters cell of {NAME} assigns no string to {name}")
    return pattern.sub(lambda _: f"{name} = {json.dumps(value)}", source, count=1)


def render(where: Publish) -> nbformat.NotebookNode:
    """colab_grade.ipynb with the kit's repository and branch filled in and an Open-in-Colab link on top."""
    nb = nbformat.read(TA_NOTEBOOK, as_version=4)
    cell = parameters_cell(nb)
    cell.source = set_parameter(cell.source, "KIT_REPO", where.kit_git)
    cell.source = set_parameter(cell.source, "KIT_BRANCH", where.branch)
    link = new_markdown_cell(f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
                             f"({where.colab_url(NAME)})")
    link.id = "colab-link"
    nb.cells.insert(0, link)
    return nb


def write_release_copy(where: Publish, release_dir: Path) -> Path:
    """Write the rendered notebook to release_dir/colab_grade.ipynb and return its path."""
    release_dir.mkdir(parents=True, exist_ok=True)
    path = release_dir / NAME
    nbformat.write(render(where), path)
    return path
