"""One size for every failure message, wherever it arrives from and whichever output it goes to.

A message is text a submission controls: an exception's message, a device marker's, an intake
problem quoting a broken file. Uncapped, one `raise AssertionError("x" * 50_000_000)` made a 50 MB
row in results.csv, a 50 MB feedback page and a 400 MB autograded notebook, and broke every later
read of results.csv (Python's csv module refuses a field over 128 KiB). So every message is cut to
MESSAGE_CHARS with a note of what was dropped: in each row (results.CellResult, hence results.csv,
the feedback page, the class report and the gradebook), in each intake problem (intake.Submission,
also printed on the terminal), and in the error outputs the autograded notebook keeps
(preprocessors.GuardedExecute).

Control characters go too (all but newline and tab, shown as `\\xNN`): an escape sequence in a
message would otherwise recolour or rewrite the TA's terminal when the run prints it. So do unpaired
surrogates (shown as `\\udNNN`), which no UTF-8 file can hold.
"""

from __future__ import annotations

import re

#: The most characters a message keeps, its "... (N more characters)" note included.
MESSAGE_CHARS = 4000
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_ANY_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def bounded(text: str, limit: int = MESSAGE_CHARS) -> str:
    """`text`, or its first characters and "... (N more characters)" when it is longer than `limit`."""
    if len(text) <= limit:
        return text
    kept = limit - len(f"... ({len(text)} more characters)")  # the note never grows as `kept` shrinks
    return f"{text[:kept]}... ({len(text) - kept} more characters)"


def printable(text: str, one_line: bool = False) -> str:
    """`text` with every control character but newline and tab (all of them if `one_line`) written out as
    `\\xNN`, unpaired surrogates as `\\udNNN`: text any terminal shows as it is, and any UTF-8 file holds."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return (_ANY_CONTROL if one_line else _CONTROL).sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def message(text: str, limit: int = MESSAGE_CHARS) -> str:
    """A message as every output holds it: printable and at most `limit` characters."""
    return bounded(printable(text), limit)
