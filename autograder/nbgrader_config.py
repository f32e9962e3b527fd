"""nbgrader configuration shared by the kit's pipeline and by a TA running nbgrader by hand.

The kit loads this file and then points CourseDirectory.root at the folder it works in
(build/ for the release, one workspace per submission for grading).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # so nbgrader can import autograder.*

from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (  # noqa: E402
                                      AssignLatePenalties,
                                      ClearHiddenTests,
                                      ClearMarkScheme,
                                      ClearOutput,
                                      ClearSolutions,
                                      ComputeChecksums,
                                      DeduplicateIds,
                                      IgnorePattern,
                                      IncludeHeaderFooter,
                                      InstantiateTests,
                                      LimitOutput,
                                      LockCells,
                                      OverwriteCells,
                                      OverwriteKernelspec,
                                      SaveAutoGrades,
                                      SaveCells,
)

from autograder.authoring.colab_setup import AddColabSetup  # noqa: E402
from autograder.grading.preprocessors import (  # noqa: E402
                                      CheckCellMetadataOnce,
                                      GuardedExecute,
                                      GuardTests,
                                      KeepWarningsFromCostingPoints,
                                      RestoreMissingCells,
                                      SeedTests,
)
from autograder.isolation.limits import Limits  # noqa: E402
from autograder.judge.preprocess import JudgeTests  # noqa: E402

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.CourseDirectory.course_id = "dl-hwsw"

# What a student finds in place of each solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# The release: nbgrader's own steps, after AddColabSetup has put the Open-in-Colab link and the
# locked setup cell on top (so SaveCells records the setup cell and grading restores it if edited).
c.GenerateAssignment.preprocessors = [
    AddColabSetup,
    IncludeHeaderFooter,
    InstantiateTests,
    LockCells,
    ClearSolutions,
    ClearOutput,
    CheckCellMetadataOnce,
    ComputeChecksums,
    SaveCells,
    ClearHiddenTests,
    ClearMarkScheme,
    ComputeChecksums,
    CheckCellMetadataOnce,
]

# nbconvert validates the whole notebook against nbformat's schema after every preprocessor (16 times a
# submission, ~1.3 ms each); once after a pass's last preprocessor is enough to refuse an invalid notebook
# (the error then names that preprocessor rather than the one that broke it).
c.Exporter.optimistic_validation = True

# Time limits while grading (defaults in autograder/isolation/limits.py; `make grade` flags override them).
# The notebooks' slowest cells take a few seconds on a 2-core CPU; an infinite loop stops here.
c.merge(Limits().nbgrader_config())
# Once the last cell ran, the kernel is killed rather than asked to exit: its outputs are all in,
# and the grader kills whatever it left running anyway. A graceful exit waits for ipykernel to
# signal its children and see them go, ~3.4 s whenever a notebook leaves DataLoader workers behind.
c.GuardedExecute.shutdown_kernel = "immediate"

# GuardedExecute replaces nbgrader's Execute: a dead or stuck kernel costs only the cells
# that did not run. nbgrader gives a test cell 0 points when anything reaches stderr, so a
# DeprecationWarning or TensorFlow's logging would zero a correct answer: the kit relabels
# stderr as stdout right after execution; errors still fail the cell through their "error" output.
# Before execution: deleted test cells come back from the source (nbgrader alone only restores
# edited ones), and every test cell first undoes any patching of what tests rely on.
c.Autograde.sanitize_preprocessors = [
    ClearOutput,
    DeduplicateIds,
    OverwriteKernelspec,
    RestoreMissingCells,
    OverwriteCells,
    CheckCellMetadataOnce,
]
# SeedTests before GuardTests: each puts a line on top of every test cell, so the guard's check runs
# first and the seeding (through the generators it checked) second.
c.Autograde.autograde_preprocessors = [
    JudgeTests,
    SeedTests,
    GuardTests,
    GuardedExecute,
    KeepWarningsFromCostingPoints,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadataOnce,
]
