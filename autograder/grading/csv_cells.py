"""CSV cells a spreadsheet shows as text, never runs as a formula; and the kit's way to read them back.

TAs open grades.csv, results.csv, timings.csv and tampered.csv in Excel, LibreOffice or Google
Sheets, and upload them to an LMS. A student controls many of their cells: failure messages, the
names of their folders (student id, assignment) and so what the tests are called in an error row.
A cell that begins with `=`, `+`, `-` or `@` is a formula to a spreadsheet (`=HYPERLINK(...)`
phishes, `+cmd|' /C calc'!A0` runs a program through DDE in old Excel), and one that begins with
a tab or carriage return is one once the spreadsheet trims it. As OWASP's "CSV Injection" page
recommends, such a cell is written with a leading `'`, which spreadsheets take as "this is text"
and do not show. A cell that already begins with `'` gets one more, so that `original` undoes
`inert` exactly: the kit's own readers (report.read_results, hence the report rebuild and the
exports; the class report's timings) read back the text the grader meant.

defusedcsv (PyPI) does the writing half, but leaves tab and carriage return alone, does not escape
a leading `'` and rewrites every `|` of a risky cell, so its cells cannot be read back exactly.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterable
from pathlib import Path

#: What makes a spreadsheet read a cell as a formula (OWASP), and the text marker that defuses it.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
TEXT_MARK = "'"
#: The largest field the readers accept: any that the grader ever wrote, messages uncapped (earlier runs) included.
_FIELD_LIMIT = min(sys.maxsize, 2**31 - 1)


def inert(cell: object) -> str:
    """The CSV text of `cell`: "'" before anything that starts like a formula, or with the mark itself."""
    text = str(cell)
    return TEXT_MARK + text if text.startswith((*FORMULA_STARTS, TEXT_MARK)) else text


def original(cell: str) -> str:
    """The text that `inert` wrote as `cell`."""
    return cell[len(TEXT_MARK):] if cell.startswith(TEXT_MARK) else cell


def write_rows(path: Path, header: list[str], rows: Iterable[Iterable[object]]) -> None:
    """Write a CSV file of `header` and `rows`, every cell inert."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow([inert(name) for name in header])
        writer.writerows([inert(cell) for cell in row] for row in rows)


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file that write_rows wrote, as {column: original text}, however long its cells."""
    previous = csv.field_size_limit(_FIELD_LIMIT)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            return [{original(k): original(v or "") for k, v in row.items() if k is not None}
                    for row in csv.DictReader(f)]
    finally:
        csv.field_size_limit(previous)
