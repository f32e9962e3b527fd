"""Intake on notebooks broken every way a file can be (Hypothesis, seeded): each one costs only its own student,
with a reason the TA can read, and a notebook it accepts goes through the later steps without breaking them.

Each example is the 01 reference submission, mutated (truncated, bytes flipped, nested 100,000 deep, NaN,
a key twice, an unpaired surrogate, another encoding, wrong types, too many cells...), vetted by
`discover` against the real release, beside a classmate's intact copy. No kernel.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import nbformat
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autograder.authoring.samples import SUBMISSIONS
from autograder.grading import recover
from autograder.grading.intake import MAX_CELLS, MAX_DEPTH, MAX_NOTEBOOK_BYTES, discover
from autograder.grading.messages import MESSAGE_CHARS
from autograder.paths import BUILD

REFERENCE = (SUBMISSIONS / "reference" / "01_tensors" / "01_tensors.ipynb").read_text(encoding="utf-8")
KNOWN = {"01_tensors"}
#: The catch-all's words: a problem intake did not foresee. Every broken file here must get a reason of its own.
UNFORESEEN = "the grader could not read it"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _in_metadata(text: str, value: str) -> str:
    """`text` with `"fuzz": value` added to the notebook's metadata (the last "metadata" key: the notebook's),
    or in front of it where an earlier mutation left no metadata."""
    at = text.rfind('"metadata": {') + len('"metadata": {')
    return f'{text[:at]}"fuzz": {value}, {text[at:]}'


def _cells(count: int) -> str:
    notebook = json.loads(REFERENCE)
    notebook["cells"] = [{"cell_type": "raw", "id": f"c{i}", "metadata": {}, "source": ""} for i in range(count)]
    return json.dumps(notebook)


def _flipped(data: bytes, at: int, byte: int) -> bytes:
    return data[:at] + bytes([byte]) + data[at + 1:]


WRONG_TYPES = ['"cells": {"x": [', '"cells": [7, ', '"cells": ["",']
TEXT_MUTATIONS = {
    "truncated": lambda text, n: text[: n % max(len(text), 1)],
    "deep": lambda text, n: _in_metadata(text, nested([MAX_DEPTH + 1, 999, 1001, 100_000][n % 4])),
    "constant": lambda text, n: _in_metadata(text, ["NaN", "Infinity", "-Infinity"][n % 3]),
    "key twice": lambda text, n: text.replace('"nbformat": 4', '"nbformat": 4, "nbformat": 4', 1),
    "surrogate": lambda text, n: _in_metadata(text, ['"\\ud800"', '"a\\udfff"', '{"\\udbff": 1}'][n % 3]),
    "wrong type": lambda text, n: text.replace('"cells": [', WRONG_TYPES[n % len(WRONG_TYPES)]),
    "no cells": lambda text, n: text.replace('"cells"', '"cels"', 1),
    "old format": lambda text, n: text.replace('"nbformat": 4', f'"nbformat": {n % 6}', 1),
    "many cells": lambda text, n: _cells(MAX_CELLS + 1 + n % 3),
    "json value": lambda text, n: ["null", "[]", '"cells"', "1e999", "{}"][n % 5],
}
BYTE_MUTATIONS = {
    "utf-16": lambda data, n: data.decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass"),
    "bom": lambda data, n: b"\xef\xbb\xbf" + data,
    "byte flipped": lambda data, n: _flipped(data, n % max(len(data), 1), 0x80 + n % 128),
    "latin-1": lambda data, n: data.decode("utf-8", "replace").encode("latin-1", "replace").replace(b"?", b"\xe9", 1),
}


@st.composite
def broken_notebooks(draw) -> bytes:
    """The reference submission's bytes with one to three mutations applied, or bytes of no notebook at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=200))
    text = REFERENCE
    for name in draw(st.lists(st.sampled_from(sorted(TEXT_MUTATIONS)), min_size=0, max_size=2)):
        text = TEXT_MUTATIONS[name](text, draw(st.integers(0, 10**6)))
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        data = BYTE_MUTATIONS[draw(st.sampled_from(sorted(BYTE_MUTATIONS)))](data, draw(st.integers(0, 10**6)))
    return data


def vetted(data: bytes, root: Path) -> tuple:
    """The submissions `discover` finds in a class of the broken notebook ("mallory") and an intact one ("alice")."""
    for student, content in (("alice", REFERENCE.encode()), ("mallory", data)):
        folder = root / student / "01_tensors"
        folder.mkdir(parents=True)
        (folder / "01_tensors.ipynb").write_bytes(content)
    return tuple(discover(root, KNOWN, BUILD))


def accepted_notebook_survives_the_later_steps(text: str) -> None:
    """What the grading workspace (autograde.prepare_workspace) and nbgrader do first with an accepted notebook."""
    nbformat.writes(nbformat.reads(text, as_version=4)).encode("utf-8")
    rebuilt = recover.rebuild_file(text, BUILD / "release" / "01_tensors" / "01_tensors.ipynb",
                                   BUILD / "source" / "01_tensors" / "01_tensors.ipynb")
    if rebuilt is not None:
        nbformat.writes(rebuilt).encode("utf-8")


@settings(max_examples=120, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(broken_notebooks())
def test_any_broken_notebook_costs_only_its_student_with_a_reason(release, data):
    with tempfile.TemporaryDirectory() as root:
        alice, mallory = vetted(data, Path(root))
    assert (alice.student, alice.problem) == ("alice", None), "the classmate is graded"
    assert (mallory.student, mallory.assignment) == ("mallory", "01_tensors")
    if mallory.problem is None:
        accepted_notebook_survives_the_later_steps(data.decode("utf-8"))
    else:
        assert mallory.problem.startswith("01_tensors.ipynb ") and UNFORESEEN not in mallory.problem, mallory.problem
        assert len(mallory.problem) <= MESSAGE_CHARS


@pytest.mark.parametrize(("content", "reason"), [
    (_in_metadata(REFERENCE, nested(100_000)), f"cannot be graded: it nests deeper than {MAX_DEPTH} levels"),
    (_in_metadata(REFERENCE, nested(MAX_DEPTH)), f"cannot be graded: it nests deeper than {MAX_DEPTH} levels"),
    (_in_metadata(REFERENCE, "NaN"), "is not valid JSON: NaN is not a JSON value"),
    (REFERENCE.replace('"nbformat": 4', '"nbformat": 4, "nbformat": 5', 1),
     "is not valid JSON: the key 'nbformat' appears twice in one object"),
    (_in_metadata(REFERENCE, '"\\ud800"'), "cannot be graded: it holds text that is not Unicode"),
    (_cells(1_000_000), f"cannot be graded: it has 1000000 cells, more than the {MAX_CELLS} a notebook may have"),
    (REFERENCE.encode("utf-16"), "cannot be read: it is not UTF-8 text"),
    (b"\xef\xbb\xbf" + REFERENCE.encode(), "is not valid JSON (Unexpected UTF-8 BOM"),
])
def test_each_kind_of_broken_notebook_gets_its_own_reason(release, tmp_path, content, reason):
    data = content if isinstance(content, bytes) else content.encode("utf-8")
    alice, mallory = vetted(data, tmp_path)
    assert alice.problem is None
    assert mallory.problem.startswith(f"01_tensors.ipynb {reason}"), mallory.problem


def test_a_notebook_over_the_size_limit_is_refused_unread(tmp_path):
    alice, mallory = vetted(b"", tmp_path)
    os.truncate(tmp_path / "mallory" / "01_tensors" / "01_tensors.ipynb", MAX_NOTEBOOK_BYTES + 1)  # sparse: no disk
    alice, mallory = discover(tmp_path, KNOWN)
    assert "cannot be read: it is larger than the 100 MiB a notebook may be" in mallory.problem


def test_a_failure_intake_did_not_foresee_is_still_only_that_students(release, tmp_path, monkeypatch):
    def breaks(nb, release):
        if nb.metadata.get("fuzz"):
            raise KeyError("something no one foresaw")
        return False

    monkeypatch.setattr(recover, "needs_rebuild", breaks)
    alice, mallory = vetted(_in_metadata(REFERENCE, "1").encode(), tmp_path)
    assert alice.problem is None
    assert mallory.problem == f"{UNFORESEEN}: KeyError: 'something no one foresaw'"


@pytest.mark.parametrize("name", [b"@SUM(1+1)", b"=1+1", b"-2+3", b"+cmd", b"01_tensors$$", b"{x} 100%s \"q\" 'q'",
                                  b"<b>bold</b>", b"new\nline", b"tab\tand\rcr", b"\x1b[31mred", b"caf\xe9"])
def test_folder_names_are_kept_as_printable_text(tmp_path, name):
    for student, assignment in ((name, b"01_tensors"), (b"bob", name)):
        folder = os.path.join(bytes(tmp_path), student, assignment)
        os.makedirs(folder)
        Path(os.fsdecode(folder), "01_tensors.ipynb").write_text(REFERENCE, encoding="utf-8")
    found = {(s.student, s.assignment): s for s in discover(tmp_path, KNOWN)}
    assert len(found) == 2 and all(s.problem for s in found.values()), "each gets an error row"
    for student, assignment in found:
        text = student + assignment
        text.encode("utf-8")  # no surrogates: any CSV or page can hold it
        assert not any(ord(c) < 32 or 0x7f <= ord(c) <= 0x9f for c in text), "one line, no control character"
