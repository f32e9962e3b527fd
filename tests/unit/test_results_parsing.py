"""grading/results.py on hand-made outputs and a hand-made graded workspace: no kernel, no nbgrader run.

What a student is told comes from here: the status and message of each test cell, never the
traceback that quotes hidden test source, one row per device the test checked, and a zero for a
test whose integrity check did not run.
"""

from __future__ import annotations

import pytest

from autograder.grading.markers import METADATA_KEY
from autograder.grading.results import (
    CellResult,
    cell_scores,
    collect,
    describe_error,
    last_error_line,
    with_seed,
    without_stack_frames,
)
from dlkit import integrity
from dlkit.seeding import SEED_MARKER

from .notebooks import error, graded_cell, graded_workspace, notebook, stdout

HIDDEN = "assert_hidden_property(student_answer)  # HIDDEN-TEST-SOURCE"


@pytest.mark.parametrize(("ename", "evalue", "status", "message"), [
    ("AssertionError", "expected shape (2, 3)", "failed", "expected shape (2, 3)"),
    ("AssertionError", "", "failed", "a check failed (the test gave no message)"),
    ("CellTimeoutError", "", "timeout", "the cell ran past the time limit"),
    ("CellTimeoutError", "ran past the 2 s limit", "timeout", "the cell ran past the 2 s limit"),
    ("NotebookTimeout", "not run: the notebook ran past its 3 s limit", "timeout",
     "not run: the notebook ran past its 3 s limit"),
    ("CellNotRun", "not run: the kernel died while running cell 4", "error",
     "not run: the kernel died while running cell 4"),
    ("DeadKernelError", "the kernel died while running this cell", "error", "the kernel died while running this cell"),
    ("TamperingDetected", "numpy.allclose was replaced", "tampered", "tampered: numpy.allclose was replaced"),
    ("NotImplementedError", "", "error",
     "NotImplementedError: the exercise still raises the stub's NotImplementedError"),
    ("ValueError", "  bad input  ", "error", "ValueError: bad input"),
    ("KeyError", "", "error", "KeyError"),
])
def test_each_error_output_gets_its_status_and_message(ename, evalue, status, message):
    assert describe_error(error(ename, evalue)) == (status, message)


def test_autograph_frames_quoted_in_an_error_are_dropped_but_its_sentences_stay():
    message = ("in user code:\n\n"
               '    File "/tmp/ipykernel_1/123.py", line 7, in check_step  *\n'
               f"        {HIDDEN}\n"
               '    File "/grader/work/source.py", line 3, in step\n'
               "        return x @ w\n"
               "        ^^^^^^^^^\n\n"
               "    ValueError: Dimensions must be equal, but are 3 and 4")
    cleaned = without_stack_frames(message)
    assert "HIDDEN-TEST-SOURCE" not in cleaned and "File " not in cleaned and "^^^" not in cleaned
    assert cleaned.endswith("ValueError: Dimensions must be equal, but are 3 and 4")


def test_the_last_error_of_a_log_explains_a_failed_grading():
    log = "[INFO] converting\n[ERROR] Kernel died before replying to kernel_info\n[INFO] cleaning up\n"
    assert last_error_line(log) == "Kernel died before replying to kernel_info"
    assert last_error_line("[INFO] one\n[INFO] two\n") == "[INFO] two"
    assert last_error_line("") == "no log"


def test_a_failure_says_which_seed_drew_its_inputs_and_a_pass_does_not():
    failed = CellResult("ann", "a1", "test_x", 0.0, 1.0, "failed", "too large")
    passed = CellResult("ann", "a1", "test_x", 1.0, 1.0, "passed", "")
    assert with_seed(failed, {"test_x": 42}).message == "too large [inputs: dlkit.seed_everything(42)]"
    assert with_seed(passed, {"test_x": 42}) == passed
    assert with_seed(failed, {}) == failed


def test_device_rows_of_one_cell_count_once():
    rows = [CellResult("ann", "a1", "test_x", 0.0, 2.0, "failed", "", device) for device in ("cpu", "fakegpu")]
    rows.append(CellResult("ann", "a1", "test_y", 1.0, 1.0, "passed", ""))
    scores = cell_scores(rows)
    assert scores == {("ann", "a1", "test_x"): (0.0, 2.0), ("ann", "a1", "test_y"): (1.0, 1.0)}


def guarded(grade_id: str, outputs: list, checked: bool = True, points: float = 1.0, nonce: str = "c0ffee",
            devices: dict | None = None):
    """A test cell as the grader ran it: between integrity requests, with the markers GuardedExecute accepted
    in its metadata (markers.py): its after-check's if `checked`, and `devices`."""
    source = "\n".join([integrity.request("before", grade_id), HIDDEN, integrity.request("after", grade_id, (), nonce)])
    cell = graded_cell(grade_id, source, points, outputs)
    cell.metadata[METADATA_KEY] = {"integrity": nonce} if checked else {}
    if devices:
        cell.metadata[METADATA_KEY]["devices"] = devices
    return cell


def device(status: str, message: str = "") -> dict:
    return {"status": status, "message": message}


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> dict[tuple[str, str], CellResult]:
    """collect() on a workspace with a test cell per outcome, graded on cpu and fakegpu; rows by (grade_id, device)."""
    ids = ["test_pass", "test_fail", "test_timeout", "test_unchecked", "test_devices", "test_partial", "test_missing"]
    source = notebook(*(graded_cell(gid, HIDDEN, 2.0 if gid == "test_devices" else 1.0) for gid in ids))
    quoting_hidden_source = error("AssertionError", "wrong shape", ["Traceback", HIDDEN, "AssertionError: wrong shape"])
    autograded = notebook(
        guarded("test_pass", []),
        guarded("test_fail", [stdout(f"{SEED_MARKER} 1234\n"), quoting_hidden_source], checked=False),
        guarded("test_timeout", [error("KeyboardInterrupt"), error("CellTimeoutError")], checked=False),
        guarded("test_unchecked", [stdout(f"all good\n{integrity.MARKER} test_unchecked c0ffee\n")], checked=False),
        guarded("test_devices", [], checked=False, points=2.0,
                devices={"cpu": device("passed"), "fakegpu": device("failed", "tensors on two devices"),
                         "cuda": device("passed")}),
        guarded("test_partial", []),
    )
    autograded.cells[4].outputs.append(error("AssertionError", "on fakegpu: tensors on two devices"))
    scores = {"test_pass": 1.0, "test_fail": 0.0, "test_timeout": 0.0, "test_unchecked": 1.0, "test_devices": 0.0,
              "test_partial": 0.5}
    workspace, source_path = graded_workspace(tmp_path_factory.mktemp("ws"), "ann", "a1", source, autograded, scores)
    found = collect(workspace, source_path, True, "", ["cpu", "fakegpu"])
    assert all(r.student_id == "ann" and r.assignment == "a1" for r in found)
    return {(r.grade_id, r.device): r for r in found}


def test_a_passing_test_scores_full_without_a_message(rows):
    row = rows["test_pass", ""]
    assert (row.status, row.score, row.message) == ("passed", 1.0, "")


def test_a_failure_keeps_the_assertion_message_and_seed_but_not_the_traceback(rows):
    row = rows["test_fail", ""]
    assert row.status == "failed"
    assert row.message == "wrong shape [inputs: dlkit.seed_everything(1234)]"


def test_a_timeout_wins_over_the_keyboard_interrupt_it_caused(rows):
    assert rows["test_timeout", ""].status == "timeout"


def test_a_test_whose_integrity_check_did_not_run_is_voided_whatever_it_printed(rows):
    row = rows["test_unchecked", ""]
    assert (row.status, row.score) == ("tampered", 0.0)
    assert "integrity check did not run" in row.message


def test_a_device_checking_test_gets_a_row_per_requested_device_with_the_cells_score(rows):
    assert ("test_devices", "cuda") not in rows, "a device the run did not ask for is ignored"
    assert ("test_devices", "") not in rows
    cpu, fakegpu = rows["test_devices", "cpu"], rows["test_devices", "fakegpu"]
    assert (cpu.status, fakegpu.status) == ("passed", "failed")
    assert fakegpu.message == "on fakegpu: tensors on two devices"
    assert {(r.score, r.max_score) for r in (cpu, fakegpu)} == {(0.0, 2.0)}


def test_a_partial_score_without_an_error_is_a_failure_that_says_the_score(rows):
    assert (rows["test_partial", ""].status, rows["test_partial", ""].message) == ("failed", "scored 0.5 of 1")


def test_a_test_cell_nbgrader_never_recorded_is_an_error_row(rows):
    row = rows["test_missing", ""]
    assert (row.status, row.score, row.max_score) == ("error", 0.0, 1.0)
    assert row.message == "test cell missing from the graded notebook"


def test_no_row_quotes_the_hidden_test_source(rows):
    assert all("HIDDEN-TEST-SOURCE" not in r.message for r in rows.values())


def test_a_failed_grading_gives_every_test_an_error_row_with_the_logs_reason(tmp_path):
    source = notebook(graded_cell("test_a"), graded_cell("test_b", points=3.0))
    workspace, source_path = graded_workspace(tmp_path, "bob", "a1", source, source, {})
    found = collect(workspace, source_path, False, "[ERROR] nbformat.ValidationError: bad cell\n", ["cpu"])
    assert [(r.grade_id, r.status, r.score, r.max_score) for r in found] == [("test_a", "error", 0.0, 1.0),
                                                                             ("test_b", "error", 0.0, 3.0)]
    assert all(r.message == "grading failed: nbformat.ValidationError: bad cell" for r in found)
