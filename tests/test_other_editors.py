"""A notebook that comes back from another editor still grades exactly like the original.

Students open the release in Colab, VS Code or an older Jupyter, which rewrite cell ids, add
their own metadata, keep outputs and let students add cells. Variants of the reference
submission, made the way those editors save files, are graded by the real pipeline and must
score the same on every test cell as the reference.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import uuid
from pathlib import Path

import nbformat
import pytest

from autograder.authoring.colab_setup import SETUP_GRADE_ID
from autograder.authoring.samples import reference_submission
from autograder.paths import REPO

from .conftest import read_csv

pytestmark = pytest.mark.pipeline
ASSIGNMENT = "01_tensors"


def nbgrader(cell: dict) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def without_ids_nbformat_4_4(nb: dict) -> None:
    """Jupyter before 2021 (nbformat 4.4): no cell ids at all."""
    nb["nbformat_minor"] = 4
    for cell in nb["cells"]:
        cell.pop("id", None)


def new_random_ids(nb: dict) -> None:
    """An editor that assigns fresh ids to every cell (copy-pasted or re-created cells)."""
    for cell in nb["cells"]:
        cell["id"] = str(uuid.uuid4())


def colab_metadata(nb: dict) -> None:
    """What Colab writes: its own notebook and cell metadata, a GPU accelerator, its kernelspec; no lock flags."""
    nb["metadata"].update({"colab": {"provenance": [], "gpuType": "T4", "name": f"{ASSIGNMENT}.ipynb"},
                           "accelerator": "GPU", "kernelspec": {"name": "python3", "display_name": "Python 3"},
                           "language_info": {"name": "python"}})
    for cell in nb["cells"]:
        cell["metadata"]["id"] = uuid.uuid4().hex[:12]
        cell["metadata"].pop("editable", None)
        cell["metadata"].pop("deletable", None)
        if cell["cell_type"] == "code":
            cell["metadata"].update({"colab": {"base_uri": "https://localhost:8080/"}, "outputId": "9f2c1e",
                                     "executionInfo": {"status": "ok", "timestamp": 1763800000000}})


def vscode_metadata(nb: dict) -> None:
    """What VS Code writes, with a kernelspec named after an environment the grader does not have."""
    nb["metadata"].update({"vscode": {"interpreter": {"hash": "3f5c0a"}},
                           "kernelspec": {"name": "dl-course-env", "display_name": "Python 3 (ipykernel)",
                                          "language": "python"},
                           "language_info": {"name": "python", "version": "3.12.4"}})
    for cell in nb["cells"]:
        cell["metadata"]["vscode"] = {"languageId": "python" if cell["cell_type"] == "code" else "markdown"}


def outputs_left_in(nb: dict) -> None:
    """Executed outputs saved with the file: text, a plot, stale test failures, an error in a non-test cell."""
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    first_plain = True
    for count, cell in enumerate(c for c in nb["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = count + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "old output\n"},
                           {"output_type": "display_data", "metadata": {},
                            "data": {"image/png": png, "text/plain": "<Figure>"}}]
        if nbgrader(cell).get("grade"):
            cell["outputs"].append({"output_type": "error", "ename": "AssertionError", "evalue": "stale failure",
                                    "traceback": ["AssertionError: stale failure"]})
        elif first_plain and not nbgrader(cell):
            first_plain = False
            cell["outputs"].append({"output_type": "error", "ename": "NameError", "evalue": "name 'x' is not defined",
                                    "traceback": ["NameError: name 'x' is not defined"]})


def student_added_cells(nb: dict) -> None:
    """Notes and scratch code a student put between an exercise and its test, and at the end."""
    at = next(i for i, c in enumerate(nb["cells"]) if nbgrader(c).get("solution")) + 1
    nb["cells"][at:at] = [
        {"cell_type": "markdown", "id": "my-notes", "metadata": {}, "source": "My notes: FLOPs count 2 per FMA."},
        {"cell_type": "code", "id": "my-scratch", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "scratch = [i * i for i in range(5)]\nprint(scratch)"}]
    nb["cells"].append({"cell_type": "code", "id": "my-last", "metadata": {}, "execution_count": None,
                        "outputs": [], "source": "print('done')"})


VARIANTS = [without_ids_nbformat_4_4, new_random_ids, colab_metadata, vscode_metadata, outputs_left_in,
            student_added_cells]


@pytest.fixture(scope="module")
def graded_variants(release, tmp_path_factory):
    """Grade the reference submission and each variant of it as one class."""
    class_dir, out = tmp_path_factory.mktemp("editors"), tmp_path_factory.mktemp("editors-grades")
    original = json.loads(nbformat.writes(reference_submission(ASSIGNMENT)))
    for make in [None, *VARIANTS]:
        nb = copy.deepcopy(original)
        if make is not None:
            make(nb)
        folder = class_dir / (make.__name__ if make else "reference") / ASSIGNMENT
        folder.mkdir(parents=True)
        text = json.dumps(nb, indent=1)
        nbformat.validate(nbformat.reads(text, as_version=4))  # what the editor saved is a valid notebook
        (folder / f"{ASSIGNMENT}.ipynb").write_text(text, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--assignments",
                           ASSIGNMENT, "--workers", "2", "--cell-timeout", "45"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {}
    for row in read_csv(Path(out) / "results.csv"):
        rows.setdefault(row["student_id"], {})[row["grade_id"]] = (row["score"], row["status"], row["message"])
    return {"rows": rows, "out": Path(out)}


def test_the_reference_scores_full_marks(graded_variants):
    reference = graded_variants["rows"]["reference"]
    assert reference and all(status == "passed" for _, status, _ in reference.values())


@pytest.mark.parametrize("make", VARIANTS, ids=[v.__name__ for v in VARIANTS])
def test_variant_grades_like_the_reference(graded_variants, make):
    assert graded_variants["rows"][make.__name__] == graded_variants["rows"]["reference"]


def test_the_setup_cell_ran_in_the_grader_quietly_and_offline(graded_variants):
    """In the grader's sandbox (no network) dlkit is installed: the setup cell reports and never calls pip."""
    path = graded_variants["out"] / "autograded" / "outputs_left_in" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    cell = next(c for c in nbformat.read(path, as_version=4).cells if nbgrader(c).get("grade_id") == SETUP_GRADE_ID)
    assert not [o for o in cell.outputs if o.output_type == "error"], "the setup cell ran without an error"
    text = "".join(o.get("text", "") for o in cell.outputs)
    assert "devices: CPU" in text and "installing" not in text, text
