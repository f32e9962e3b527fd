"""Hidden tests draw their random inputs from a seed per student, assignment and test: a regrade is identical."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from autograder.authoring.samples import SUBMISSIONS
from autograder.course import assignments
from autograder.grading.results import autograded_cells
from autograder.paths import REPO
from dlkit.seeding import seed_for as seed_of

from .conftest import read_csv


def test_the_seed_is_fixed_per_student_assignment_and_test():
    assert seed_of("ann", "01_tensors", "test_maxpool") == seed_of("ann", "01_tensors", "test_maxpool")
    others = {seed_of("bob", "01_tensors", "test_maxpool"), seed_of("ann", "02_backprop", "test_maxpool"),
              seed_of("ann", "01_tensors", "test_conv_matches_torch")}
    assert seed_of("ann", "01_tensors", "test_maxpool") not in others and len(others) == 3
    assert 0 <= seed_of("ann", "01_tensors", "t") < 2**32, "NumPy's global seed must fit in 32 bits"


UNSEEDED = re.compile(r"default_rng\(\s*\)|RandomState\(\s*\)|Generator\(\s*\)(?!\.manual_seed)|random\.Random\(\s*\)")


@pytest.mark.parametrize("name", list(assignments()))
def test_test_cells_draw_only_from_seeded_generators(name):
    """A generator made without a seed draws from the OS: the regrade and the failure message's seed would lie."""
    nb = nbformat.read(assignments()[name], as_version=4)
    test_cells = {gid for gid, _ in autograded_cells(assignments()[name])}
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") in test_cells:
            assert not UNSEEDED.search(cell.source), f"{name}/{cell.metadata.nbgrader.grade_id}: unseeded generator"


@pytest.mark.pipeline
def test_grading_the_same_class_twice_gives_byte_identical_results(tmp_path):
    class_dir = tmp_path / "class"
    for student, sample in [("ann", "buggy_kernel_flip"), ("bob", "buggy_kernel_flip"), ("cid", "buggy_no_clamp"),
                            ("dee", "reference")]:
        shutil.copytree(SUBMISSIONS / sample / "01_tensors", class_dir / student / "01_tensors")
    outs = []
    for run in ("first", "second"):
        out = tmp_path / run
        proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--workers", "2",
                               "--assignments", "01_tensors", "--cell-timeout", "45"],
                              cwd=REPO, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr
        outs.append(out)
    assert (outs[0] / "results.csv").read_bytes() == (outs[1] / "results.csv").read_bytes()
    assert (outs[0] / "grades.csv").read_bytes() == (outs[1] / "grades.csv").read_bytes()
    rows = [r for r in read_csv(outs[0] / "results.csv") if r["grade_id"] == "test_conv_matches_torch"]
    by_student = {r["student_id"]: r for r in rows}
    for student in ("ann", "bob"):
        seed = seed_of(student, "01_tensors", "test_conv_matches_torch")
        assert by_student[student]["status"] == "failed"
        assert by_student[student]["message"].endswith(f"[inputs: dlkit.seed_everything({seed})]")
    assert by_student["ann"]["message"] != by_student["bob"]["message"], "each student gets inputs of their own"
    assert "seed_everything" not in by_student["dee"]["message"], "a passed test needs no seed"
