"""The compact class (tests/pipeline/compact_class.py), graded once per session with default flags, and the
lecture decks of two notebooks, built once per session."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from autograder.authoring.slides import build_slides
from tests.pipeline import compact_class
from tests.pipeline.grader import Graded, run_grader


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def class_dir(tmp_path_factory) -> Path:
    return compact_class.build(tmp_path_factory.mktemp("class"))


@pytest.fixture(scope="session")
def submitted_digest(class_dir) -> dict[str, str]:
    """The class's files before grading: grading must leave them byte for byte."""
    return tree_digest(class_dir)


@pytest.fixture(scope="session")
def graded(release, class_dir, submitted_digest, tmp_path_factory) -> Graded:
    """The compact class and the blank release, graded as `make grade` would."""
    flags = ["--with-blank", "--cell-timeout", compact_class.CELL_TIMEOUT]
    if compact_class.FILTER:
        flags += ["--assignments", ",".join(compact_class.FILTER)]
    return run_grader(class_dir, tmp_path_factory.mktemp("grades"), *flags, workers=2, timeout=3600,
                      env={**os.environ, **compact_class.PLANTED_SECRETS})


#: Students of the compact class graded again on a local Dask cluster: the engine's three outcomes
#: (full marks, one mistake, a dead kernel) and two students with the same wrong answer (their seeds differ).
REGRADED = ["reference", "buggy_fma", "hostile_kills_kernel", "seeded_ann", "seeded_bob"]


@pytest.fixture(scope="session")
def regraded_on_dask(release, class_dir, tmp_path_factory) -> Graded:
    """REGRADED graded a second time, on the other engine (test_engines, test_seeding)."""
    again = tmp_path_factory.mktemp("regrade")
    for student in REGRADED:
        shutil.copytree(class_dir / student / "01_tensors", again / student / "01_tensors")
    return run_grader(again, tmp_path_factory.mktemp("regrade-grades"), "--assignments", "01_tensors",
                      "--cell-timeout", compact_class.CELL_TIMEOUT, "--engine", "dask", workers=2)


#: The decks the tests build (`make slides-check` measures all eight): 01, the quickest notebook, and
#: 02, whose sections were the tallest (a page of text, a 60-line cell and its plot: three frames high).
DECKS = ["01_tensors", "02_backprop"]


@pytest.fixture(scope="session")
def lecture_decks(tmp_path_factory) -> dict[str, Path]:
    """`make slides` of DECKS into a folder of their own, with MPLBACKEND=Agg as while grading (the decks
    must still get their plots): test_slides.py reads them, test_browser.py shows and measures them."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MPLBACKEND", "Agg")
        return build_slides(DECKS, out=tmp_path_factory.mktemp("slides"))
