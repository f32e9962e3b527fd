"""Open every release notebook with an Open-in-Colab link and a setup cell, added at release time.

The instructor sources stay free of this boilerplate (and of the repository's address): the
release step (nbgrader generate_assignment, see nbgrader_config.py) runs AddColabSetup first,
so the link and the setup cell are written from `[tool.dlkit.publish]` in pyproject.toml and
from the source's `"dlkit": {"accelerator": ...}` notebook metadata, identically in all eight.

The setup cell also installs what this notebook imports and a runtime may lack (07's onnx,
onnxruntime and onnxscript), pinned as the course environment pins them: the list is derived from
the notebook's own imports and the `course` extra of pyproject.toml, never written per notebook.
torch, TensorFlow, NumPy and matplotlib are never installed by it: a runtime's own builds (Colab's
CUDA torch) must not be replaced.

The setup cell is locked (nbgrader restores it if a student edits it) and graded by nothing.
The grader runs it too, inside its sandbox without network: it only calls pip when `dlkit`
cannot be imported (never the case there), and it catches everything, so it cannot fail a notebook.
"""

from __future__ import annotations

import re

import tomllib
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_markdown_cell
from nbgrader.preprocessors import NbGraderPreprocessor

from autograder.authoring import publish
from autograder.course import first_use_modules, notebook_imports
from autograder.paths import REPO

SETUP_GRADE_ID = "dlkit_setup"
LINK_CELL_ID = "colab-link"
SETUP_CELL_ID = "dlkit-setup"

_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"

_LINK = """\
[![Open In Colab]({badge})]({url})

**Where to run it.** Anywhere with Python: in Colab (the badge above), or in Jupyter after
`pip install -e .` in the course kit's folder. Run the setup cell below first: it installs the
course's helper package `dlkit` if it is missing and tells you whether {want}.

**Checking your work.** Below each exercise is a test cell with its visible checks. Run the whole
notebook from the top (Colab: *Runtime → Restart session and run all*; Jupyter: *Kernel → Restart
Kernel and Run All Cells*). A failing check stops the run at its test cell with a message saying what
was expected; fix your code and run again until every cell runs. Grading adds hidden checks with
fresh random inputs on every device the grader has, so make your code right in general."""

_WANTS = {
    "cpu": "this runtime is right for the notebook (it needs no GPU)",
    "gpu": "this runtime has the GPU this notebook measures (switch with *Runtime → Change runtime type*)",
    "tpu": "this runtime has the TPU this notebook measures (switch with *Runtime → Change runtime type*)",
}

_SETUP = '''\
# Setup: run this cell first. It installs the course's helper package dlkit when this runtime
# lacks it (Colab), then says what the runtime has and whether this notebook wants a GPU/TPU.
# It never stops the notebook: read what it prints. Locked: the grader runs it as it is.
def _dlkit_setup(wants={wants!r}, requirement={requirement!r}, extras={extras!r}):
    import importlib, importlib.util, subprocess, sys
    missing = [pin for module, pin in extras if importlib.util.find_spec(module) is None]
    if missing:
        print("installing", ", ".join(missing), "...")
        try:
            subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *missing],
                           capture_output=True, text=True, timeout=900)
        except Exception as pip_error:
            print("could not install them:", repr(pip_error))
        importlib.invalidate_caches()
    try:
        import dlkit
    except ImportError:
        print("installing dlkit from", requirement, "...")
        try:
            pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", requirement],
                                 capture_output=True, text=True, timeout=600)
            why = (pip.stderr or pip.stdout).strip()[-800:]
        except Exception as pip_error:
            why = repr(pip_error)
        importlib.invalidate_caches()
        try:
            import dlkit
        except ImportError:
            print("could not install dlkit:", why)
            print(f"Fix: run  !pip install \\"{{requirement}}\\"  in a new cell, then this cell again.")
            return
    try:
        dlkit.report_runtime(wants)
    except Exception as report_error:  # an older dlkit or an odd runtime: say so, never stop the notebook
        print("dlkit", getattr(dlkit, "__version__", "?"), "is installed; no runtime report:", repr(report_error))


_dlkit_setup()
del _dlkit_setup'''


#: Libraries a runtime brings in its own build (Colab's CUDA torch, TensorFlow): never installed by the setup cell.
RUNTIME_OWNED = {"torch", "tensorflow", "keras", "numpy", "matplotlib", "jax"}
#: Import names whose PyPI distribution is named otherwise in the course pins.
DISTRIBUTION = {"tensorflow": "tensorflow-cpu"}


def course_pins() -> dict[str, str]:
    """{distribution name: pinned requirement} of pyproject.toml's `course` extra, the one list of versions."""
    with open(REPO / "pyproject.toml", "rb") as f:
        pins = tomllib.load(f)["project"]["optional-dependencies"]["course"]
    return {re.split(r"[=<>!~\[ ]", pin, maxsplit=1)[0].lower(): pin for pin in pins}


def extra_requirements(nb: NotebookNode) -> list[tuple[str, str]]:
    """(module, pinned requirement) for each library the notebook imports, or that what it imports loads on
    first use (torch.onnx's exporter needs onnxscript), that a runtime may lack."""
    pins = course_pins()
    imported = notebook_imports(nb)
    on_first_use = first_use_modules(nb, imported)
    extras = []
    for module in dict.fromkeys(name.split(".")[0] for name in [*imported, *on_first_use]):
        pin = pins.get(DISTRIBUTION.get(module, module).replace("_", "-").lower())
        if pin and module not in RUNTIME_OWNED:
            extras.append((module, pin))
    return extras


def wanted_accelerator(nb: NotebookNode) -> str:
    """What the source notebook says it wants: "cpu" (default), "gpu" or "tpu"."""
    wants = nb.metadata.get("dlkit", {}).get("accelerator", "cpu")
    if wants not in _WANTS:
        raise ValueError(f'notebook metadata "dlkit": {{"accelerator": {wants!r}}}: expected one of {sorted(_WANTS)}')
    return wants


def link_cell(url: str, wants: str) -> NotebookNode:
    """The markdown cell with the Open-in-Colab badge and how to run and check the notebook."""
    cell = new_markdown_cell(_LINK.format(badge=_BADGE, url=url, want=_WANTS[wants]))
    cell.id = LINK_CELL_ID
    return cell


def setup_cell(requirement: str, wants: str, extras: list[tuple[str, str]] = ()) -> NotebookNode:
    """The locked, ungraded code cell that installs dlkit (and `extras`, (module, pinned requirement)
    pairs) where missing, and reports the runtime."""
    cell = new_code_cell(_SETUP.format(wants=wants, requirement=requirement, extras=[tuple(e) for e in extras]))
    cell.id = SETUP_CELL_ID
    cell.metadata["nbgrader"] = {"grade": False, "grade_id": SETUP_GRADE_ID, "locked": True,
                                 "schema_version": 3, "solution": False, "task": False}
    return cell


def colab_metadata(nb: NotebookNode, wants: str) -> None:
    """Notebook metadata Colab reads when it opens the file: preselect a GPU or TPU runtime."""
    if wants == "gpu":
        nb.metadata["accelerator"] = "GPU"
        nb.metadata["colab"] = {"gpuType": "T4", "provenance": []}
    elif wants == "tpu":
        nb.metadata["accelerator"] = "TPU"
        nb.metadata["colab"] = {"provenance": []}


class AddColabSetup(NbGraderPreprocessor):
    """Prepend the Colab link and the setup cell to a notebook being released."""

    def preprocess(self, nb, resources):
        where = publish.load()
        name, notebook = resources["nbgrader"]["assignment"], resources["nbgrader"]["notebook"]
        wants = wanted_accelerator(nb)
        nb.cells[:0] = [link_cell(where.colab_url(f"{name}/{notebook}.ipynb"), wants),
                        setup_cell(where.pip, wants, extra_requirements(nb))]
        colab_metadata(nb, wants)
        return nb, resources
