"""What the grader keeps of the markers test cells send on the marker channel (src/dlkit/channel.py).

GuardedExecute (preprocessors.py), in the grader's own process, hands every display_data message
of the channel's MIME type to a MarkerInbox before its output budget counts anything, and never
keeps the message as an output. What the inbox accepts goes into the cell's metadata under
METADATA_KEY, which no kernel message can write and which GuardedExecute empties before it runs a
notebook (a submission's own copy counts for nothing); results.py reads it there. So a correct
answer that prints megabytes keeps its markers (the budget only drops output), and nothing a
submission prints or displays is ever taken for a marker.

What is accepted, and why that is enough:
- the channel's key, announced by dlkit.integrity.snapshot: only while the grader's own first cell
  runs, before any student code has;
- an integrity marker ("the grader's checks ran in this test"): only the cell's own, for the
  grade_id and nonce of the after-check request in its source, with the HMAC of both under the key.
  The key lives in the kernel only in the checker's closure, so student code that skipped the
  checks cannot make the marker, even having read the nonce from the cell's source or seen another
  cell's marker go by;
- device markers (ondevice.py): for a kind the kit knows and a valid status, the last per kind,
  their messages capped (messages.py). They cannot be authenticated, since they report what ran
  next to student code, and need not be: results.device_rows never lets a device marker turn a
  cell nbgrader failed into a pass. Kept one per kind, they cannot carry a flood past the budget.
"""

from __future__ import annotations

import hmac
import re

from nbformat import NotebookNode

from autograder.grading.messages import message
from dlkit.channel import MIME
from dlkit.devices import KNOWN_KINDS
from dlkit.integrity import REQUEST

#: The cell metadata key under which GuardedExecute records the markers it accepted.
METADATA_KEY = "dlkit_markers"
DEVICE_STATUSES = ("passed", "failed", "skipped")
_AFTER_REQUEST = re.compile(rf"\('{REQUEST}', 'after', '([^']*)', \([^)]*\), '([0-9a-f]+)'\)")


def after_request(source: str) -> tuple[str, str] | None:
    """(grade_id, nonce) of the after-check request GuardTests put in a test cell's source, or None."""
    found = _AFTER_REQUEST.search(source)
    return (found.group(1), found.group(2)) if found else None


def marker_record(msg: dict) -> dict | None:
    """The record a kernel message carries on the marker channel, or None if it is not a marker."""
    data = (msg.get("content") or {}).get("data") if msg.get("msg_type") == "display_data" else None
    if not isinstance(data, dict) or MIME not in data:
        return None
    return data[MIME] if isinstance(data[MIME], dict) else {}  # a malformed marker is still no output


def forget(cell: NotebookNode) -> None:
    """Drop whatever the cell's metadata says about markers: only what a run records there counts."""
    cell.get("metadata", {}).pop(METADATA_KEY, None)


def checked_nonce(cell: NotebookNode) -> str | None:
    """The nonce of the integrity marker the grader accepted in this cell, if any."""
    return cell.get("metadata", {}).get(METADATA_KEY, {}).get("integrity")


def device_markers(cell: NotebookNode, allowed: set[str]) -> dict[str, dict]:
    """{device kind: {"status", "message"}} the grader accepted in this cell, for the kinds in `allowed`."""
    found = cell.get("metadata", {}).get(METADATA_KEY, {}).get("devices", {})
    return {kind: dict(marker) for kind, marker in found.items() if kind in allowed}


class MarkerInbox:
    """The markers of one notebook's run, as they arrive; accepted ones go into their cell's metadata."""

    def __init__(self) -> None:
        self.key: bytes | None = None

    def take(self, cell: NotebookNode, record: dict, graders_cell: bool) -> None:
        """Accept `record`, a marker that arrived while `cell` ran, if it is one the grader can rely on."""
        kind = record.get("marker")
        if kind == "channel" and graders_cell and self.key is None:
            try:
                self.key = bytes.fromhex(str(record.get("key")))
            except ValueError:
                return
        elif kind == "integrity" and self._authentic(cell, record):
            self._kept(cell)["integrity"] = record["nonce"]
        elif (kind == "device" and record.get("device") in KNOWN_KINDS
              and record.get("status") in DEVICE_STATUSES):
            devices = self._kept(cell).setdefault("devices", {})
            devices[record["device"]] = {"status": record["status"], "message": message(str(record.get("message", "")))}

    def _authentic(self, cell: NotebookNode, record: dict) -> bool:
        """The integrity marker of this cell's own after-check, signed with the channel's key."""
        request = after_request(cell.get("source", "")) if cell.get("cell_type") == "code" else None
        if self.key is None or request is None or (record.get("grade_id"), record.get("nonce")) != request:
            return False
        expected = hmac.new(self.key, f"{request[0]} {request[1]}".encode(), "sha256").hexdigest()
        return hmac.compare_digest(expected, str(record.get("mac", "")))

    @staticmethod
    def _kept(cell: NotebookNode) -> dict:
        return cell.setdefault("metadata", NotebookNode()).setdefault(METADATA_KEY, {})
