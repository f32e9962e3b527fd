"""grading/intake.py vetting what is not a link or a special file (tests/test_intake.py has those):
which notebook of a folder is graded, and each kind of unusable submission becoming an error row
with a reason the TA can act on, while the rest of the class is still found.

Tiny class folders under tmp_path; no release, no kernel.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from autograder.grading.intake import discover, load_notebook, pick_notebook

from .notebooks import graded_cell, notebook

KNOWN = {"01_tensors", "02_backprop"}


def write(path: Path, text: str | None = None) -> Path:
    """A valid notebook at `path`, or the given text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if text is None:
        nbformat.write(notebook(graded_cell("test_a")), path)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def problems(root: Path) -> dict[tuple[str, str], str | None]:
    return {(s.student, s.assignment): s.problem for s in discover(root, KNOWN)}


def test_the_notebook_named_after_the_assignment_wins_else_the_only_one(tmp_path):
    named = write(tmp_path / "a" / "01_tensors.ipynb")
    write(tmp_path / "a" / "scratch.ipynb")
    assert pick_notebook(tmp_path / "a", "01_tensors") == (named, None)
    only = write(tmp_path / "b" / "my copy of 01.ipynb")
    write(tmp_path / "b" / ".01_tensors-checkpoint.ipynb")  # hidden files are never the submission
    assert pick_notebook(tmp_path / "b", "01_tensors") == (only, None)


def test_several_notebooks_none_named_after_the_assignment_are_refused_by_name(tmp_path):
    write(tmp_path / "a" / "draft.ipynb")
    write(tmp_path / "a" / "final.ipynb")
    path, problem = pick_notebook(tmp_path / "a", "01_tensors")
    assert path is None
    assert problem == ("several notebooks (draft.ipynb, final.ipynb) and none named 01_tensors.ipynb: "
                       "which one is the submission?")


def test_a_truncated_file_is_refused_with_where_the_json_broke(tmp_path):
    nb, problem = load_notebook(write(tmp_path / "01_tensors.ipynb", '{"cells": [\n {"cell_type": "code", '))
    assert nb is None
    assert problem.startswith("01_tensors.ipynb is not valid JSON (Expecting property name")
    assert "line 2, column" in problem and "saved completely" in problem


def test_json_that_is_not_a_notebook_is_refused(tmp_path):
    nb, problem = load_notebook(write(tmp_path / "01_tensors.ipynb", '{"hello": "world"}'))
    assert nb is None and problem.startswith("01_tensors.ipynb is not a valid Jupyter notebook: ")


def test_a_file_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "01_tensors.ipynb"
    path.write_bytes(b'{"cells": "\xff\xfe"}')
    nb, problem = load_notebook(path)
    assert nb is None and problem.startswith("01_tensors.ipynb cannot be read: ")


def test_a_valid_notebook_is_read_back_whole(tmp_path):
    nb, problem = load_notebook(write(tmp_path / "01_tensors.ipynb"))
    assert problem is None
    assert nb.cells[0].metadata.nbgrader.grade_id == "test_a"


def test_each_unusable_submission_is_an_error_row_and_the_class_is_still_found(tmp_path):
    write(tmp_path / "alice" / "01_tensors" / "01_tensors.ipynb")
    write(tmp_path / "alice" / "02_backprop" / "02_backprop.ipynb", "{not json")
    write(tmp_path / "bob" / "99_nonexistent" / "99_nonexistent.ipynb")
    (tmp_path / "carol" / "01_tensors").mkdir(parents=True)
    write(tmp_path / "bad name!" / "01_tensors" / "01_tensors.ipynb")
    (tmp_path / "notes.txt").write_text("not a student")
    write(tmp_path / ".ipynb_checkpoints" / "01_tensors" / "01_tensors.ipynb")
    found = problems(tmp_path)
    assert list(found) == [("alice", "01_tensors"), ("alice", "02_backprop"), ("bad name!", "01_tensors"),
                           ("bob", "99_nonexistent"), ("carol", "01_tensors")]
    assert found["alice", "01_tensors"] is None
    assert "02_backprop.ipynb is not valid JSON" in found["alice", "02_backprop"]
    assert found["bad name!", "01_tensors"] == "student folder name 'bad name!' is not a usable student id"
    assert found["bob", "99_nonexistent"] == ("'99_nonexistent' is not an assignment of this course "
                                              "(known: 01_tensors, 02_backprop)")
    assert found["carol", "01_tensors"] == "no .ipynb file in 01_tensors/"


def test_a_missing_class_folder_is_an_error_not_an_empty_class(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        discover(tmp_path / "nowhere", KNOWN)
