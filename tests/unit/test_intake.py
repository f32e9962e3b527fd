"""Intake reads nothing outside the class folder as a submission, and no special file hangs it.

Tiny class folders under tmp_path; no release, no grading run.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from autograder.grading.intake import discover, read_notebook_bytes
from autograder.paths import NOTEBOOKS

KNOWN = {"01_tensors"}
INSTRUCTOR = NOTEBOOKS / "01_tensors.ipynb"  # what a link in a student's archive would reach for


def write_notebook(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(new_notebook(cells=[new_code_cell("x = 1")]), path)
    return path


def by_student(submissions) -> dict:
    return {s.student: s for s in submissions}


def test_a_regular_notebook_is_accepted(tmp_path):
    write_notebook(tmp_path / "alice" / "01_tensors" / "01_tensors.ipynb")
    (alice,) = discover(tmp_path, KNOWN)
    assert alice.problem is None and alice.notebook == tmp_path / "alice" / "01_tensors" / "01_tensors.ipynb"


def test_a_notebook_that_links_to_the_instructor_source_is_refused(tmp_path):
    folder = tmp_path / "mallory" / "01_tensors"
    folder.mkdir(parents=True)
    (folder / "01_tensors.ipynb").symlink_to(INSTRUCTOR)
    (mallory,) = discover(tmp_path, KNOWN)
    assert "01_tensors.ipynb" in mallory.problem and "symbolic link" in mallory.problem
    assert str(INSTRUCTOR) in mallory.problem  # the TA sees where it pointed


def test_a_linked_assignment_folder_is_refused(tmp_path):
    write_notebook(tmp_path / "elsewhere" / "01_tensors.ipynb")
    (tmp_path / "class" / "mallory").mkdir(parents=True)
    (tmp_path / "class" / "mallory" / "01_tensors").symlink_to(tmp_path / "elsewhere")
    (mallory,) = discover(tmp_path / "class", KNOWN)
    assert (mallory.assignment, mallory.notebook) == ("01_tensors", None)
    assert "assignment folder 01_tensors/ is a symbolic link" in mallory.problem


def test_a_linked_student_folder_is_refused_once_per_assignment_in_it(tmp_path):
    write_notebook(tmp_path / "elsewhere" / "01_tensors" / "01_tensors.ipynb")
    write_notebook(tmp_path / "class" / "alice" / "01_tensors" / "01_tensors.ipynb")
    (tmp_path / "class" / "mallory").symlink_to(tmp_path / "elsewhere")
    students = by_student(discover(tmp_path / "class", KNOWN))
    assert students["alice"].problem is None
    mallory = students["mallory"]
    assert (mallory.assignment, mallory.notebook) == ("01_tensors", None)
    assert "student folder mallory/ is a symbolic link" in mallory.problem


def test_a_link_to_another_file_inside_the_class_is_refused_too(tmp_path):
    """Refusing every link is simpler, and safe, than judging where each one leads."""
    alice = write_notebook(tmp_path / "alice" / "01_tensors" / "01_tensors.ipynb")
    (tmp_path / "bob" / "01_tensors").mkdir(parents=True)
    (tmp_path / "bob" / "01_tensors" / "01_tensors.ipynb").symlink_to(alice)
    students = by_student(discover(tmp_path, KNOWN))
    assert students["alice"].problem is None
    assert "symbolic link" in students["bob"].problem


def test_a_fifo_named_like_a_notebook_is_refused_without_hanging(tmp_path):
    folder = tmp_path / "mallory" / "01_tensors"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "01_tensors.ipynb")  # opening it for reading would wait for a writer forever
    found = []
    worker = threading.Thread(target=lambda: found.extend(discover(tmp_path, KNOWN)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "discover hung on a FIFO"
    (mallory,) = found
    assert "not a regular file but a FIFO" in mallory.problem


def test_a_link_swapped_in_after_intake_is_not_read(tmp_path):
    """The worker reads the notebook again when it grades it: a link that appeared since is refused there too."""
    path = tmp_path / "01_tensors.ipynb"
    path.symlink_to(INSTRUCTOR)
    with pytest.raises(OSError, match="symbolic link"):
        read_notebook_bytes(path)


def test_a_hard_link_is_read_as_the_regular_file_it_is(tmp_path):
    """Documented limit: a hard link cannot be told from a copy (tar will not unpack one leading outside)."""
    alice = write_notebook(tmp_path / "alice" / "01_tensors" / "01_tensors.ipynb")
    (tmp_path / "bob" / "01_tensors").mkdir(parents=True)
    os.link(alice, tmp_path / "bob" / "01_tensors" / "01_tensors.ipynb")
    assert all(s.problem is None for s in discover(tmp_path, KNOWN))
