"""The student release, built by nbgrader: no solution or hidden test reaches it; Colab link and setup cell on top."""

from __future__ import annotations

import os
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient
from nbgrader.api import Gradebook

from autograder.authoring import colab_setup, publish, ta_notebook
from autograder.course import assignments
from autograder.paths import BUILD

BLOCKS = {"solution": ("### BEGIN SOLUTION", "### END SOLUTION"),
          "hidden test": ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")}


def split_source(source_nb) -> tuple[dict[str, set[str]], set[str]]:
    """Lines inside each kind of secret block, and the lines outside every block."""
    secret = {kind: set() for kind in BLOCKS}
    public = set()
    for cell in source_nb.cells:
        inside = None
        for line in cell.source.splitlines():
            stripped = line.strip()
            for kind, (begin, end) in BLOCKS.items():
                if stripped == begin:
                    inside = kind
                elif stripped == end:
                    inside = None
            if stripped in {m for pair in BLOCKS.values() for m in pair}:
                continue
            (secret[inside] if inside else public).add(stripped)
    return secret, public


@pytest.mark.parametrize("name", list(assignments()))
def test_release_has_no_solution_or_hidden_test_text(release, name):
    source = nbformat.read(assignments()[name], as_version=4)
    released = release[name].read_text()
    released_lines = {line.strip() for cell in nbformat.reads(released, as_version=4).cells
                      for line in cell.source.splitlines()}
    secret, public = split_source(source)
    assert secret["solution"] and secret["hidden test"], "the source should have solutions and hidden tests"
    for kind, lines in secret.items():  # whole lines: `moves = 0` is not leaked by a visible `self.moves = 0`
        leaked = [line for line in lines - public if len(line) > 8 and line in released_lines]
        assert not leaked, f"{kind} text leaked into the release of {name}: {leaked[:3]}"
    for marker in ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"):
        assert marker not in released


@pytest.mark.parametrize("name", list(assignments()))
def test_release_keeps_every_exercise_and_test_cell(release, name):
    def graded_ids(nb, key):
        return [c.metadata["nbgrader"]["grade_id"] for c in nb.cells if c.metadata.get("nbgrader", {}).get(key)]

    source = nbformat.read(assignments()[name], as_version=4)
    student = nbformat.read(release[name], as_version=4)
    assert graded_ids(student, "solution") == graded_ids(source, "solution")
    assert graded_ids(student, "grade") == graded_ids(source, "grade")
    for cell in student.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            assert "raise NotImplementedError()" in cell.source, cell.metadata["nbgrader"]["grade_id"]


@pytest.mark.parametrize("name", list(assignments()))
def test_release_opens_with_the_colab_link_and_the_locked_setup_cell(release, name):
    where = publish.load()
    source = nbformat.read(assignments()[name], as_version=4)
    student = nbformat.read(release[name], as_version=4)
    link, setup = student.cells[0], student.cells[1]
    assert link.cell_type == "markdown" and where.colab_url(f"{name}/{name}.ipynb") in link.source
    assert "Restart session and run all" in link.source, "students are told how to run the visible checks in Colab"
    expected = colab_setup.setup_cell(where.pip, wants(source), colab_setup.extra_requirements(source))
    assert setup.cell_type == "code" and setup.source == expected.source
    meta = setup.metadata["nbgrader"]
    assert meta["grade_id"] == colab_setup.SETUP_GRADE_ID and meta["locked"] and not meta["grade"]
    assert not meta["solution"] and setup.metadata.get("editable") is False
    assert student.cells[2].id == source.cells[0].id, "the source's own cells follow unchanged"
    assert student.metadata.get("accelerator") == {"cpu": None, "gpu": "GPU", "tpu": "TPU"}[wants(source)]


def wants(source) -> str:
    return colab_setup.wanted_accelerator(source)


def test_notebooks_that_measure_accelerators_ask_for_a_gpu():
    asked = {name: wants(nbformat.read(path, as_version=4)) for name, path in assignments().items()}
    assert {name for name, kind in asked.items() if kind == "gpu"} >= {"01_tensors", "08_data_parallel"}


def test_setup_cell_runs_cleanly_in_a_kernel_and_reports_the_runtime(release):
    """Every notebook's setup cell, run in a real kernel of this environment, where dlkit is installed."""
    sources = [nbformat.read(path, as_version=4).cells[1].source for path in release.values()]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources],
                                  metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    for cell in nb.cells:
        text = "".join(o.get("text", "") for o in cell.outputs)
        assert not [o for o in cell.outputs if o.output_type == "error"], cell.outputs
        assert "devices: CPU" in text and "installing" not in text, text
        assert "GPU" in text if "wants='gpu'" in cell.source else "needs no accelerator" in text, text


def test_setup_cell_without_dlkit_and_without_a_reachable_index_never_fails(release, tmp_path):
    """Where dlkit is missing and pip cannot get it, the cell explains what to do and does not raise."""
    source = nbformat.read(release["01_tensors"], as_version=4).cells[1].source
    source = source.replace(publish.load().pip, str(tmp_path / "no-such-package"))
    script = "import sys\nsys.modules['dlkit'] = None  # import dlkit raises ImportError\n" + source
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PIP_NO_INDEX": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert done.returncode == 0, done.stderr
    assert "could not install dlkit" in done.stdout and "!pip install" in done.stdout, done.stdout


def test_ta_notebook_in_the_release_has_the_configured_repository(release):
    nb = nbformat.read(release["01_tensors"].parent.parent / ta_notebook.NAME, as_version=4)
    where = publish.load()
    params = ta_notebook.parameters_cell(nb).source
    assert f'KIT_REPO = "{where.git_url}"' in params and f'KIT_BRANCH = "{where.branch}"' in params
    assert where.colab_url(ta_notebook.NAME) in nb.cells[0].source


def test_gradebook_knows_the_setup_cell_so_grading_restores_an_edited_one(release):
    where = publish.load()
    with Gradebook(f"sqlite:///{BUILD / 'gradebook.db'}") as gb:
        for name in release:
            cell = gb.find_source_cell(colab_setup.SETUP_GRADE_ID, name, name)
            source = nbformat.read(assignments()[name], as_version=4)
            expected = colab_setup.setup_cell(where.pip, wants(source), colab_setup.extra_requirements(source))
            assert cell.locked and cell.source == expected.source


def test_each_setup_cell_installs_its_own_notebooks_missing_libraries_at_the_course_pins():
    pins = colab_setup.course_pins()
    extras = {name: dict(colab_setup.extra_requirements(nbformat.read(path, as_version=4)))
              for name, path in assignments().items()}
    assert {"onnx", "onnxruntime", "onnxscript"} <= set(extras["07_deployment"]), "07 exports with torch.onnx"
    assert extras["07_deployment"]["onnxruntime"] == pins["onnxruntime"], "the pin of pyproject's course extra"
    for name, found in extras.items():
        assert not set(found) & colab_setup.RUNTIME_OWNED, f"{name} would replace the runtime's own {set(found)}"
        if name != "07_deployment":
            assert "onnx" not in found, f"{name} does not use ONNX"
