"""What unit and pipeline tests share: the release build (once per session) and a CSV reader.

tests/unit/ runs no grading and no whole notebook; tests/pipeline/ does (its conftest.py grades the
compact class once per session, and tests/pipeline/grader.py is the one way tests run the grader).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from autograder.authoring.release import build_release


@pytest.fixture(scope="session")
def release() -> dict[str, Path]:
    return build_release()


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))
