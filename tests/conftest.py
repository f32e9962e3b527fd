"""What unit and pipeline tests share: the release build (once per session), a CSV reader, a spreadsheet's
reading of a CSV, a stripped notebook.

tests/unit/ runs no grading and no whole notebook; tests/pipeline/ does (its conftest.py grades the
compact class once per session, and tests/pipeline/grader.py is the one way tests run the grader).
"""

from __future__ import annotations

import copy
import csv
from pathlib import Path

import nbformat
import pytest

from autograder.authoring.release import build_release


@pytest.fixture(scope="session")
def release() -> dict[str, Path]:
    return build_release()


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def spreadsheet_cells(path: Path) -> list[list[str]]:
    """Each cell of a CSV file as a spreadsheet takes it: "formula" for one it would evaluate, else its text.

    Excel, LibreOffice and Google Sheets evaluate a cell that starts with = + - or @ (after any leading
    tab, carriage return or space, which they trim) unless it is a plain number; a leading ' makes it text.
    """
    def taken(cell: str) -> str:
        trimmed = cell.lstrip("\t\r ")
        if trimmed[:1] in ("=", "+", "-", "@"):
            try:
                float(trimmed)
            except ValueError:
                return "formula"
        return cell
    with open(path, newline="", encoding="utf-8") as f:
        return [[taken(cell) for cell in row] for row in csv.reader(f)]


def stripped(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """What a notebook pasted cell by cell into a fresh one looks like: no nbgrader metadata, no cell ids."""
    nb = copy.deepcopy(nb)
    for cell in nb.cells:
        cell.metadata.pop("nbgrader", None)
        cell.metadata.pop("deletable", None)
        cell.metadata.pop("editable", None)
        cell.pop("id", None)
    nb.nbformat_minor = 4
    return nb
