"""grading/preprocessors.py's notebook rewrites: RestoreMissingCells, SeedTests and GuardTests.

Each on a notebook of a few cells, then the three together through a real kernel and
results.collect: the lines they write are the ones the kernel and the results reader agree on.
"""

from __future__ import annotations

import re

import nbformat
from nbformat.v4 import new_markdown_cell
from traitlets.config import Config

from autograder.grading.preprocessors import GuardedExecute, GuardTests, RestoreMissingCells, SeedTests
from autograder.grading.results import collect
from dlkit import integrity
from dlkit.seeding import seed_for

from .notebooks import answer_cell, error, graded_cell, graded_workspace, notebook

AFTER = re.compile(rf"^\(lambda: None\).*\('{integrity.REQUEST}', 'after', '([^']*)', \([^)]*\), '([0-9a-f]+)'\)",
                   re.MULTILINE)


def ids(nb) -> list[str]:
    return [c.metadata.get("nbgrader", {}).get("grade_id", "") for c in nb.cells]


def test_deleted_locked_cells_come_back_where_the_source_has_them_but_answers_do_not(tmp_path):
    intro = new_markdown_cell("Read this first.")
    intro.metadata["nbgrader"] = {"grade": False, "solution": False, "locked": True, "grade_id": "intro",
                                  "schema_version": 3}
    run = [error("AssertionError", "from the instructor's run")]
    source = notebook(intro, answer_cell("ans_a"), graded_cell("test_a", "assert f() == 1", outputs=run),
                      answer_cell("ans_b"), graded_cell("test_b"), graded_cell("test_c", "assert g() == 2"))
    source.cells[2].execution_count = 7
    path = tmp_path / "source" / "a1" / "a1.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(source, path)
    student = notebook(answer_cell("ans_a", "def f():\n    return 1"), graded_cell("test_b"))
    config = Config()
    config.CourseDirectory.root = str(tmp_path)
    nb, _ = RestoreMissingCells(config=config).preprocess(student, {"nbgrader": {"assignment": "a1", "notebook": "a1"}})
    assert ids(nb) == ["intro", "ans_a", "test_a", "test_b", "test_c"], "ans_b, a solution, is not copied"
    assert nb.cells[1].source == "def f():\n    return 1", "the student's answer is kept"
    restored = nb.cells[2]
    assert restored.source == "assert f() == 1" and restored.outputs == [] and restored.execution_count is None
    assert nb.cells[4].source == "assert g() == 2"


def test_each_test_cell_is_seeded_per_student_assignment_and_test_and_answers_are_not():
    def seeded(student: str):
        nb = notebook(answer_cell("ans_a"), graded_cell("test_a", "assert True"), graded_cell("test_b"))
        return SeedTests().preprocess(nb, {"nbgrader": {"student": student, "assignment": "a1"}})[0]

    ann, bob = seeded("ann"), seeded("bob")
    assert ann.cells[0].source == answer_cell("ans_a").source
    first, rest = ann.cells[1].source.split("\n", 1)
    call = "__import__('dlkit.seeding').seeding.seed_test({})"
    assert first.startswith(call.format(seed_for("ann", "a1", "test_a")))
    assert rest == "assert True"
    assert ann.cells[2].source.startswith(call.format(seed_for("ann", "a1", "test_b")))
    assert ann.cells[1].source != bob.cells[1].source, "two students draw different inputs"


def test_every_test_cell_is_bracketed_by_checks_and_the_snapshot_watches_what_tests_import():
    test_a = "import numpy as np\nfrom math import isclose\nassert len(np.arange(3)) == 3 and isclose(1, 1)"
    nb = notebook(answer_cell("ans_a", "import os"), graded_cell("test_a", test_a),
                  graded_cell("test_b", "%time x = 1"))
    nb, _ = GuardTests().preprocess(nb, {})
    assert nb.cells[0].source.splitlines()[1].startswith("dlkit.integrity.snapshot(['numpy', 'math'])")
    assert nb.cells[1].source == "import os", "student cells are left alone"
    lines = nb.cells[2].source.splitlines()
    assert lines[0] == integrity.request("before", "test_a", ["len"]), "the builtins the test reads are checked"
    assert "\n".join(lines[1:-1]) == test_a
    afters = [AFTER.search(nb.cells[i].source) for i in (2, 3)]
    assert [m.group(1) for m in afters] == ["test_a", "test_b"], "a cell that does not parse is checked too"
    assert afters[0].group(2) != afters[1].group(2), "each cell has a nonce of its own"


def test_seeded_guarded_tests_run_in_a_kernel_read_back_as_passed_failed_and_tampered(tmp_path):
    source = notebook(answer_cell("ans", "def f():\n    return 1"),
                      graded_cell("test_pass", "assert f() == 1"),
                      graded_cell("test_fail", "assert f() == 2, f'f() gave {f()}'"),
                      graded_cell("test_patch", "import math\nmath.sqrt = lambda x: 0.0\nassert f() == 1"))
    resources = {"nbgrader": {"student": "ann", "assignment": "a1"}, "metadata": {"path": str(tmp_path)}}
    nb = nbformat.from_dict(source)
    for step in (SeedTests(), GuardTests(), GuardedExecute()):
        nb, resources = step.preprocess(nb, resources)
    workspace, source_path = graded_workspace(tmp_path / "ws", "ann", "a1", source, nb,
                                              {"test_pass": 1.0, "test_fail": 0.0, "test_patch": 0.0})
    rows = {r.grade_id: r for r in collect(workspace, source_path, True, "", ["cpu"])}
    assert (rows["test_pass"].status, rows["test_pass"].message) == ("passed", ""), "its integrity marker was found"
    seed = seed_for("ann", "a1", "test_fail")
    assert rows["test_fail"].status == "failed"
    assert rows["test_fail"].message == f"f() gave 1 [inputs: dlkit.seed_everything({seed})]"
    assert rows["test_patch"].status == "tampered"
    assert "math.sqrt was replaced" in rows["test_patch"].message


def _verdict(check, nb) -> str:
    try:
        check(nb)
    except Exception as err:  # noqa: BLE001 - the verdict is the exception itself
        return f"{type(err).__name__}: {err}"
    return "valid"


def _damaged(change) -> nbformat.NotebookNode:
    nb = notebook(answer_cell("ans_a"), graded_cell("test_a"), graded_cell("test_b"))
    change(nb.cells)
    return nb


DAMAGES = {
    "untouched": lambda cells: None,
    "points as text": lambda cells: cells[1].metadata.nbgrader.update(points="one"),
    "no points": lambda cells: cells[1].metadata.nbgrader.pop("points"),
    "no grade_id": lambda cells: cells[1].metadata.nbgrader.pop("grade_id"),
    "unknown key": lambda cells: cells[1].metadata.nbgrader.update(colour="red"),
    "grade as text": lambda cells: cells[2].metadata.nbgrader.update(grade="yes"),
    "duplicate id": lambda cells: cells[2].metadata.nbgrader.update(grade_id="test_a"),
    "old schema": lambda cells: cells[0].metadata.nbgrader.update(schema_version=1),
    "future schema": lambda cells: cells[0].metadata.nbgrader.update(schema_version=4),
}


def test_the_kits_metadata_check_gives_nbgraders_verdicts_with_the_schema_compiled_once():
    """CheckCellMetadataOnce replaces nbgrader's CheckCellMetadata in every pipeline: a damaged notebook must be
    refused (or passed) exactly as nbgrader refuses it, for the same reason."""
    from nbgrader.nbgraderformat import MetadataValidator
    from nbgrader.preprocessors import CheckCellMetadata

    from autograder.grading.preprocessors import CheckCellMetadataOnce, metadata_validator

    checks = {"nbgrader's validator": MetadataValidator().validate_nb, "the kit's": metadata_validator().validate_nb,
              "nbgrader's preprocessor": lambda nb: CheckCellMetadata().preprocess(nb, {}),
              "the kit's preprocessor": lambda nb: CheckCellMetadataOnce().preprocess(nb, {})}
    verdicts = {name: [_verdict(check, _damaged(change)) for check in checks.values()]
                for name, change in DAMAGES.items()}
    for name, (stock, kit, stock_step, kit_step) in verdicts.items():
        assert (stock, stock_step) == (kit, kit_step), f"{name}: nbgrader says {stock!r}, the kit {kit!r}"
    assert verdicts["untouched"] == ["valid"] * 4
    refused = [name for name, (_, kit, _, _) in verdicts.items() if kit != "valid"]
    assert len(refused) >= 6, verdicts
