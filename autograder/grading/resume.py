"""Remember each graded submission, so an interrupted class run resumes where it stopped.

After a submission is graded its rows are written atomically to OUT/.done/<student>--<assignment>.json
with a digest of everything the grade depends on: the submitted notebook, the instructor source,
the limits and the device kinds graded on (GradingOptions). A later run with the same command
reuses a stored result only while that digest still matches, so a resubmission or an edited test
is graded again, and nothing is counted twice.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from autograder.grading.intake import Submission
from autograder.grading.results import CellResult
from autograder.options import GradingOptions
from autograder.paths import BUILD


def digest(submission: Submission, options: GradingOptions) -> str:
    """What the grade of `submission` depends on, hashed."""
    h = hashlib.sha256()
    h.update(submission.notebook.read_bytes())
    h.update((BUILD / "source" / submission.assignment / f"{submission.assignment}.ipynb").read_bytes())
    h.update(repr(dataclasses.astuple(options.limits)).encode())
    h.update(",".join(options.devices).encode())  # graded on other devices: other rows
    return h.hexdigest()


def _path(out: Path, submission: Submission) -> Path:
    return out / ".done" / f"{submission.student}--{submission.assignment}.json"


def load(submission: Submission, options: GradingOptions) -> list[CellResult] | None:
    """The stored rows of `submission`, or None if it was never graded or has changed since."""
    try:
        stored = json.loads(_path(options.out, submission).read_text())
    except (OSError, ValueError):
        return None
    if stored.get("digest") != digest(submission, options):
        return None
    return [CellResult(**row) for row in stored["rows"]]


def save(submission: Submission, options: GradingOptions, rows: list[CellResult]) -> None:
    """Store the rows of a graded submission; written to a temporary file and renamed, so never half."""
    path = _path(options.out, submission)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"digest": digest(submission, options), "rows": [r.as_row() for r in rows]}))
    os.replace(tmp, path)
