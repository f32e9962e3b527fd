"""The compact class: graded once by `make test`, with default flags, for every pipeline test without a run of its own.

Grading is the slow part (real kernels), so one run serves many tests. It holds:

- the `reference` and (with --with-blank) the blank release of every assignment, and ONE buggy
  sample per assignment, the first listed in autograder/expected/<assignment>.toml: each loses
  exactly the points of its mistake (tests/pipeline/test_pipeline.py). Every sample against its
  expectations, the whole sample class, is `make accuracy`'s job;
- the 01_tensors samples the pipeline tests inspect (`SAMPLES_01`, with the test that reads each);
- broken submissions (`BROKEN`: notebooks intake refuses, among them ones that once stopped the whole
  run), folders whose names a spreadsheet or matplotlib would take for code (`NAMES`), the other
  editors' variants of the reference (test_other_editors.py), notebooks that lost their metadata or
  are links (test_recover_metadata.py) and copies graded under other names (`COPIES`), each under a
  student name of its own.

Tests that need their own flags or an interruption (cold kernels, Dask, a PostgreSQL gradebook,
resume, budgets, a broken kernel, devices, short cell timeouts) grade their own, smaller classes.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import uuid
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

from autograder.authoring.samples import SUBMISSIONS, expected_failures, reference_submission
from autograder.course import assignments
from autograder.paths import NOTEBOOKS
from tests.conftest import stripped

# KIT_ASSIGNMENTS=02_backprop limits the compact class to some assignments while authoring one;
# `make test` and CI grade them all.
FILTER = [a for a in os.environ.get("KIT_ASSIGNMENTS", "").split(",") if a]
SELECTED = FILTER or list(assignments())

#: The cell timeout of the compact class: a cell of 06 or 07 takes up to ~20 s on a busy 2-core machine.
CELL_TIMEOUT = "45"


def first_buggy(assignment: str) -> str:
    """The first buggy sample listed in autograder/expected/<assignment>.toml."""
    return next(s for s in expected_failures()[assignment] if s.startswith("buggy_"))


#: 01_tensors samples graded as themselves, and the tests that read them (besides the per-sample check).
SAMPLES_01 = {
    "noisy_but_correct": "test_pipeline: warnings inside graded test cells keep their points",
    "lost_metadata": "test_pipeline: answers recognised and graded in the release",
    "hostile_leaves_process": "test_pipeline: a detached process does not outlive grading",
    "hostile_floods_output": "test_pipeline: output capped",
    "hostile_kills_kernel": "test_pipeline, test_warm (cold twin), test_engines (Dask twin)",
    "hostile_memory_bomb": "test_pipeline: MemoryError under the memory limit",
    "hostile_snoops": "test_pipeline: no secrets, no network",
    "hostile_edits_tests": "per-sample check: an edited test cell is restored",
    "hostile_deletes_tests": "per-sample check: a deleted test cell is put back",
    "hostile_patches_checks": "test_tampering_pipeline",
    "hostile_patches_tensor": "test_tampering_pipeline",
    "hostile_repatch_thread": "test_tampering_pipeline",
    "hostile_repatch_thread_flicker": "test_tampering_pipeline",
    "hostile_degenerate_rng": "test_tampering_pipeline",
    "hostile_kills_everyone": "test_isolation: kills only its own processes while the class is graded beside it",
    "hostile_fork_bomb": "test_isolation: stopped by the process cap",
    "hostile_fakes_machine_failure": "per-sample check: text imitating a machine failure stops nothing",
    "buggy_numpy_grad": "test_warm: warm and cold kernels grade alike",
    "loud_but_correct": "test_hostile_text: prints megabytes inside tests and keeps full marks",
    "hostile_formula_messages": "test_hostile_text: formula messages are inert in every CSV",
    "hostile_huge_message": "test_hostile_text: an 8.5 MB message is capped everywhere",
}

#: Samples graded under another student name: (sample, assignment, student). Seeds depend on the name.
COPIES = [("buggy_kernel_flip", "01_tensors", "seeded_ann"), ("buggy_kernel_flip", "01_tensors", "seeded_bob")]

def _reference_with(value: str) -> str:
    """The reference notebook of 01 as text, with `"x": value` first in it."""
    text = (SUBMISSIONS / "reference" / "01_tensors" / "01_tensors.ipynb").read_text(encoding="utf-8")
    return f'{{"x": {value}, {text.lstrip()[1:]}'


#: Broken submissions: (student, assignment folder, file name, content: text or bytes).
BROKEN = [
    ("broken_json", "01_tensors", "01_tensors.ipynb", '{"cells": [ {"cell_type": "code", '),
    ("broken_not_notebook", "01_tensors", "01_tensors.ipynb", '{"hello": "world"}'),
    ("broken_unknown_assignment", "99_nonexistent", "99_nonexistent.ipynb", "{}"),
    ("broken_empty_folder", "01_tensors", None, None),
    # each of these once stopped the whole run, or a later step, before intake refused it
    ("broken_deep_nesting", "01_tensors", "01_tensors.ipynb", _reference_with("[" * 100_000 + "]" * 100_000)),
    ("broken_nan", "01_tensors", "01_tensors.ipynb", _reference_with("NaN")),
    ("broken_key_twice", "01_tensors", "01_tensors.ipynb", _reference_with('1, "x": 2')),
    ("broken_surrogate", "01_tensors", "01_tensors.ipynb", _reference_with('"\\udc80"')),
    ("broken_utf16", "01_tensors", "01_tensors.ipynb", _reference_with("1").encode("utf-16")),
]

#: Folders named as a spreadsheet formula or as matplotlib maths, each with a copy of the reference:
#: (student folder, assignment folder). Each gets error rows (no usable student id, no such assignment).
NAMES = [("@SUM(1+1)", "01_tensors"), ("=1+1", "01_tensors"), ("names_dollar", "01_tensors$$")]


def samples() -> list[tuple[str, str]]:
    """(sample, assignment) of every sample submission graded as itself."""
    found = [(student, a) for a in SELECTED for student in ("reference", first_buggy(a))]
    if "01_tensors" in SELECTED:
        found += [(student, "01_tensors") for student in SAMPLES_01]
    return found


# --- Notebooks saved by other editors (test_other_editors.py) ------------------------------------------------

EDITED = "01_tensors"


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
    nb["metadata"].update({"colab": {"provenance": [], "gpuType": "T4", "name": f"{EDITED}.ipynb"},
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


def editor_student(make) -> str:
    return f"editor_{make.__name__}"


def add_editor_variants(class_dir: Path) -> None:
    """The reference of 01_tensors as each editor would save it, one student per variant."""
    original = json.loads(nbformat.writes(reference_submission(EDITED)))
    for make in VARIANTS:
        nb = copy.deepcopy(original)
        make(nb)
        folder = class_dir / editor_student(make) / EDITED
        folder.mkdir(parents=True)
        text = json.dumps(nb, indent=1)
        nbformat.validate(nbformat.reads(text, as_version=4))  # what the editor saved is a valid notebook
        (folder / f"{EDITED}.ipynb").write_text(text, encoding="utf-8")


# --- Notebooks that lost their metadata, or are links (test_recover_metadata.py) ------------------------------

def add_recovery_cases(class_dir: Path) -> None:
    """A stripped reference (graded in full), an ambiguous one (refused) and a symlink (refused)."""
    reference = nbformat.read(SUBMISSIONS / "reference" / "01_tensors" / "01_tensors.ipynb", as_version=4)
    (class_dir / "recover_stripped" / "01_tensors").mkdir(parents=True)
    nbformat.write(stripped(reference), class_dir / "recover_stripped" / "01_tensors" / "01_tensors.ipynb")
    ambiguous = stripped(reference)
    ambiguous.cells.append(new_code_cell("def conv2d_single(x, w):\n    return x"))
    del ambiguous.cells[-1]["id"]  # nbformat 4.4, like the rest of it
    (class_dir / "recover_ambiguous" / "01_tensors").mkdir(parents=True)
    nbformat.write(ambiguous, class_dir / "recover_ambiguous" / "01_tensors" / "01_tensors.ipynb")
    (class_dir / "recover_linked" / "01_tensors").mkdir(parents=True)
    (class_dir / "recover_linked" / "01_tensors" / "01_tensors.ipynb").symlink_to(NOTEBOOKS / "01_tensors.ipynb")


#: Credentials a TA's shell typically holds, planted in the grader's environment for the compact class run:
#: no kernel may see them (hostile_snoops looks), and no file the run writes may contain them.
PLANTED_SECRETS = {"AWS_SECRET_ACCESS_KEY": "kit-planted-aws-7f3a9c", "PGPASSWORD": "kit-planted-pg-51d2e8",
                   "GITHUB_TOKEN": "kit-planted-gh-c0ffee"}


def build(class_dir: Path) -> Path:
    """Write the compact class into `class_dir`."""
    for student, assignment in samples():
        shutil.copytree(SUBMISSIONS / student / assignment, class_dir / student / assignment)
    for student, folder, name, content in BROKEN:
        target = class_dir / student / folder
        target.mkdir(parents=True)
        if name:
            (target / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    for student, folder in NAMES:
        shutil.copytree(SUBMISSIONS / "reference" / "01_tensors", class_dir / student / folder)
    if "01_tensors" in SELECTED:
        for sample, assignment, student in COPIES:
            shutil.copytree(SUBMISSIONS / sample / assignment, class_dir / student / assignment)
        add_editor_variants(class_dir)
        add_recovery_cases(class_dir)
    return class_dir
