"""nbgrader configuration shared by the kit's pipeline and by a TA running nbgrader by hand.

The kit loads this file and then points CourseDirectory.root at the folder it works in
(build/ for the release, one workspace per submission for grading).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # so nbgrader can import autograder.*

from autograder.preprocessors import KeepWarningsFromCostingPoints  # noqa: E402
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, Execute,  # noqa: E402
                                    IgnorePattern, LimitOutput, SaveAutoGrades)

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

c.CourseDirectory.course_id = "dl-hwsw"

# What a student finds in place of each solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Seconds one cell may run while grading. The notebooks' slowest cells (measurements) take
# a few seconds on a 2-core CPU; a student's infinite loop is stopped here.
c.Execute.timeout = 120

# nbgrader gives a test cell 0 points when anything reaches stderr, so a DeprecationWarning
# or TensorFlow's start-up logging would zero a correct answer. The kit relabels stderr as
# stdout right after execution; errors still fail the cell through their "error" output.
c.Autograde.autograde_preprocessors = [
    Execute,
    KeepWarningsFromCostingPoints,
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]
