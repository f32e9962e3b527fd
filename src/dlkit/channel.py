"""The marker channel: how the markers the grader relies on leave the kernel beside a cell's output, not in it.

A test cell leaves markers for the grader: the integrity check's "this test's checks ran"
(integrity.py) and one result per device (ondevice.py). Printed to stdout, as they once were, they
shared the cell's output budget with student code: a correct answer that printed 1.4 MB of debug
lines pushed its test's integrity marker past the grader's 1 MiB cap, and the test was voided as
tampered. Here a marker is a display_data message of its own MIME type. The grader
(autograder/grading/preprocessors.py, GuardedExecute) takes such messages out before its output
budget counts anything, checks them and records what it accepts in the cell's metadata
(autograder/grading/markers.py), so no amount of output crowds a marker out, and no output,
printed or displayed, is ever read as one.

Each bundle also carries the marker as a line of text, so a student who runs the notebook in
Jupyter or Colab sees what the grader sees; outside a Jupyter kernel the line is printed instead.
"""

from __future__ import annotations

import sys
from typing import Callable

#: The MIME type of a marker bundle; the grader reads only bundles of this type as markers.
MIME = "application/vnd.dlkit.marker+json"

Sender = Callable[[dict, str], None]


def sender() -> Sender:
    """A function that sends one marker (its record, its text line), bound to this kernel's channel now.

    Everything it uses is bound at this call: integrity.snapshot binds one before any student code
    runs, so that replacing sys.stdout, the shell's display publisher or this module later changes
    nothing about how its markers leave.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    publisher = getattr(shell, "display_pub", None)
    session, socket = getattr(publisher, "session", None), getattr(publisher, "pub_socket", None)
    if session is None or socket is None:  # not a Jupyter kernel: plain Python, a terminal IPython
        stream = sys.stdout

        def print_marker(record: dict, text: str) -> None:
            stream.write(text + "\n")
            stream.flush()
        return print_marker
    send = session.send

    def send_marker(record: dict, text: str) -> None:
        content = {"data": {MIME: record, "text/plain": text}, "metadata": {}, "transient": {}}
        send(socket, "display_data", content, parent=publisher.parent_header, ident=b"display_data")
    return send_marker


def send(record: dict, text: str) -> None:
    """Send one marker from the kernel (or process) this runs in."""
    sender()(record, text)
