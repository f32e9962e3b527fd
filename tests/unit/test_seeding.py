"""Hidden tests draw their random inputs from a seed per student, assignment and test (tests/pipeline/test_seeding.py
regrades a class and gets identical results)."""

from __future__ import annotations

import re

import nbformat
import pytest

from autograder.course import assignments
from autograder.grading.results import autograded_cells
from dlkit.seeding import seed_for as seed_of


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
