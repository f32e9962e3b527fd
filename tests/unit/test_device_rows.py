"""results.csv rows per device from the markers a test cell sent, and what a fake marker cannot do."""

from __future__ import annotations

from nbformat.v4 import new_code_cell

from autograder.grading.markers import MarkerInbox, device_markers
from autograder.grading.report import coverage, totals
from autograder.grading.results import CellResult, device_rows, without_stack_frames
from dlkit.devices import KNOWN_KINDS


def marker(device, status, message=""):
    return {"marker": "device", "device": device, "status": status, "message": message}


def received(*records, allowed=frozenset(KNOWN_KINDS)) -> dict[str, dict]:
    """The device markers of a cell that sent `records` on the marker channel, as results.py reads them."""
    cell, inbox = new_code_cell(""), MarkerInbox()
    for record in records:
        inbox.take(cell, record, graders_cell=False)
    return device_markers(cell, set(allowed))


def cell(status="passed", score=2.0, message=""):
    return CellResult("ann", "01_tensors", "test_x", score, 2.0, status, message)


def test_one_row_per_device_the_last_marker_winning():
    markers = received(marker("cpu", "failed", "fake"), {"marker": "noise"}, marker("cpu", "passed"),
                       marker("fakegpu", "failed", "on fakegpu: RuntimeError: same device"),
                       marker("cuda", "skipped", "not run: this runtime has no cuda"))
    rows = device_rows(cell("failed", 0.0, "on fakegpu: RuntimeError: same device (passed on cpu)"), markers)
    assert [(r.device, r.status) for r in rows] == [("cpu", "passed"), ("fakegpu", "failed"), ("cuda", "skipped")]
    assert rows[1].message.startswith("on fakegpu:") and all(r.score == 0.0 for r in rows)


def test_a_cell_without_markers_keeps_its_single_row():
    assert device_rows(cell(), {}) == [cell()]


def test_printed_fakes_cannot_make_a_failed_cell_look_passed():
    fakes = received(marker("cpu", "passed"), marker("cuda", "passed"))
    rows = device_rows(cell("failed", 0.0, "off by one"), fakes)
    assert {r.status for r in rows} == {"failed"} and rows[0].message == "on cpu: off by one"


def test_markers_for_kinds_not_asked_for_or_malformed_are_ignored():
    markers = received(marker("cuda", "passed"), marker("tpu9", "passed"), {"marker": "device", "device": ["cpu"]},
                       marker("cpu", "great"), marker("cpu", "passed"), allowed={"cpu"})
    assert markers == {"cpu": {"status": "passed", "message": ""}}


def test_totals_count_each_cell_once_and_coverage_names_devices():
    markers = received(marker("cpu", "passed"), marker("fakegpu", "passed"), marker("cuda", "skipped"))
    rows = device_rows(cell(), markers)
    rows.append(CellResult("ann", "01_tensors", "test_y", 1.0, 1.0, "passed", ""))
    assert totals(rows) == {("ann", "01_tensors"): (3.0, 3.0)}
    assert coverage(rows) == {("ann", "01_tensors"): ("cpu+fakegpu", "cuda")}


def test_messages_lose_library_stack_frames_that_would_show_hidden_test_source():
    tf_graph_error = ("InvalidArgumentError: Graph execution error:\n\nDetected at node dense/BiasAdd defined at "
                      "(most recent call last):\n  File \"/grader/zygote.py\", line 123, in <module>\n\n"
                      "  File \"/tmp/kit-1/ipykernel_1/123.py\", line 9, in check_one_step\n\n"
                      "Matrix size-incompatible: In[0]: [7,2], In[1]: [3,4]")
    autograph_error = ("ValueError: in user code:\n\n"
                       "    File \"/tmp/kit-1/ipykernel_1/9.py\", line 4, in hidden_helper  *\n"
                       "        secret = expected_answer(x) * 2\n        ^^^^^^^^^^^^^^\n\n"
                       "    ValueError: shapes differ")
    for message in (without_stack_frames(tf_graph_error), without_stack_frames(autograph_error)):
        assert 'File "' not in message and "check_one_step" not in message and "hidden_helper" not in message
        assert "expected_answer" not in message and "^^^" not in message and "\n\n\n" not in message
    assert without_stack_frames(tf_graph_error).endswith("Matrix size-incompatible: In[0]: [7,2], In[1]: [3,4]")
    assert without_stack_frames(autograph_error).endswith("ValueError: shapes differ")
    plain = "on cuda: expected shape (3, 4)\n  got (4, 3)"
    assert without_stack_frames(plain) == plain, "an indented line that follows no frame is the message's own"
