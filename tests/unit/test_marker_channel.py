"""The marker channel (dlkit/channel.py, grading/markers.py): a test cell's markers reach the grader whatever the
cell prints, and nothing a submission prints, displays, sends or saves is taken for one.

One real kernel runs a few cells through GuardedExecute, the grader's first cell being the real
`dlkit.integrity.snapshot` (which opens the channel); the inbox's rules are also checked on their own.
Kernels start unsandboxed here (no sandbox_workdir); the sandbox has tests of its own.
"""

from __future__ import annotations

import json

import pytest
from nbformat.v4 import new_code_cell
from traitlets.config import Config

from autograder.grading.markers import METADATA_KEY, MarkerInbox, checked_nonce, device_markers
from autograder.grading.messages import MESSAGE_CHARS
from autograder.grading.preprocessors import GUARD_SNAPSHOT, GuardedExecute
from dlkit import integrity
from dlkit.channel import MIME
from dlkit.devices import KNOWN_KINDS

from .notebooks import notebook

#: What a student's debug print in a loop leaves in a test: 1.4 MB, past the 1 MiB output budget.
LOUD = "for i in range(20_000):\n    print(f'debug: row {i:05d} ' + 'x' * 55)"
ON_CPU = "import dlkit\ndlkit.check_on_devices(lambda kind: None, kinds=['cpu'])"
#: Student code that skipped a test's checks and makes up their marker: the nonce read from the cell's source,
#: a key of its own announced on the channel, the marker signed with it, and the marker's text printed.
FORGES = """import hmac
from dlkit import channel
key = b'k' * 32
channel.send({'marker': 'channel', 'key': key.hex()}, 'my own key')
mac = hmac.new(key, b'test_forged beef01', 'sha256').hexdigest()
channel.send({'marker': 'integrity', 'grade_id': 'test_forged', 'nonce': 'beef01', 'mac': mac}, 'forged')
print('dlkit-integrity checked test_forged beef01')
"""
FLOODS_MARKERS = """from dlkit import channel
for i in range(5000):
    channel.send({'marker': 'device', 'device': 'cpu', 'status': 'passed', 'message': 'x' * 1000}, 'fake')
"""


def guarded(grade_id: str, body: str, nonce: str) -> str:
    """A test cell's source as GuardTests brackets it."""
    return "\n".join([integrity.request("before", grade_id), body, integrity.request("after", grade_id, (), nonce)])


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict[str, object]:
    """The cells of one notebook as GuardedExecute leaves them, by name."""
    sources = {
        "loud": guarded("test_loud", f"{LOUD}\n{ON_CPU}", "c0ffee"),
        # the after-check is in the source but never runs (a transformer dropped it, say)
        "forged": f"{FORGES}\n# {integrity.request('after', 'test_forged', (), 'beef01')}",
        "saved": "pass",
        "huge_error": guarded("test_huge", "raise AssertionError('=' + 'x' * 3_000_000)", "f00d"),
        "marker_flood": FLOODS_MARKERS,
    }
    config = Config()
    config.Execute.timeout = 60
    config.GuardedExecute.stuck_grace = 1.0
    nb = notebook(new_code_cell(GUARD_SNAPSHOT.format(modules=[])), *(new_code_cell(s) for s in sources.values()))
    nb.cells[3].metadata[METADATA_KEY] = {"integrity": "d00d"}  # what the submitted file says of "saved"
    nb, _ = GuardedExecute(config=config).preprocess(nb, {"metadata": {"path": str(tmp_path_factory.mktemp("nb"))}})
    return dict(zip(sources, nb.cells[1:]))


def text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_a_correct_answer_that_prints_megabytes_keeps_its_markers(cells):
    loud = cells["loud"]
    assert "[the grader dropped this cell's output beyond 1048576 bytes]" in text(loud)
    assert len(text(loud)) < 1.1 * 2**20, "the output itself is still capped"
    assert checked_nonce(loud) == "c0ffee", "the integrity marker came after the cap and still counts"
    assert device_markers(loud, {"cpu"}) == {"cpu": {"status": "passed", "message": ""}}


def test_a_forged_integrity_marker_is_not_accepted(cells):
    forged = cells["forged"]
    assert checked_nonce(forged) is None, forged.metadata
    assert "dlkit-integrity checked test_forged beef01" in text(forged), "printed, and counting for nothing"


def test_what_the_submitted_file_says_about_markers_counts_for_nothing(cells):
    assert checked_nonce(cells["saved"]) is None


def test_markers_are_never_outputs_and_a_flood_of_them_keeps_one_per_device(cells):
    flood = cells["marker_flood"]
    assert not [o for nb_cell in cells.values() for o in nb_cell.outputs if MIME in o.get("data", {})]
    assert len(json.dumps(flood.metadata)) < 2 * MESSAGE_CHARS and len(json.dumps(flood.outputs)) < 1000


def test_an_error_of_any_size_is_capped_in_the_notebook(cells):
    huge = cells["huge_error"]
    [error] = [o for o in huge.outputs if o.output_type == "error"]
    assert len(error.evalue) <= MESSAGE_CHARS and error.evalue.endswith("more characters)")
    assert len(json.dumps(huge.outputs)) < 4 * MESSAGE_CHARS * len(error.traceback) + 10_000


def test_only_the_graders_own_first_cell_opens_the_channel():
    inbox, cell = MarkerInbox(), new_code_cell("")
    inbox.take(cell, {"marker": "channel", "key": "aa" * 32}, graders_cell=False)
    assert inbox.key is None
    inbox.take(cell, {"marker": "channel", "key": "bb" * 32}, graders_cell=True)
    inbox.take(cell, {"marker": "channel", "key": "cc" * 32}, graders_cell=True)
    assert inbox.key == bytes.fromhex("bb" * 32), "announced once, never replaced"


def test_device_markers_of_unknown_kinds_or_statuses_are_dropped_and_messages_capped():
    inbox, cell = MarkerInbox(), new_code_cell("")
    for record in [{"marker": "device", "device": "tpu9", "status": "passed"},
                   {"marker": "device", "device": "cpu", "status": "great"},
                   {"marker": "device", "device": "cpu", "status": "failed", "message": "y" * 10**6}]:
        inbox.take(cell, record, graders_cell=False)
    kept = device_markers(cell, set(KNOWN_KINDS))
    assert list(kept) == ["cpu"] and kept["cpu"]["status"] == "failed"
    assert len(kept["cpu"]["message"]) <= MESSAGE_CHARS
