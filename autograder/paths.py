"""Where the kit's files live: the one module that derives paths from its own location.

Everything else imports these names, so moving a module never silently changes what it finds (the
sandbox's list of folders a kernel may not see is built from them).
"""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NOTEBOOKS = REPO / "notebooks"                     # instructor sources: solutions and hidden tests
SRC = REPO / "src"                                 # the helper package, dlkit
DATA = REPO / "data"                               # dlkit's datasets
BUILD = REPO / "build"                             # everything the commands write
RELEASE = BUILD / "release"                        # the student release, one folder per assignment

AUTOGRADER = REPO / "autograder"
CONFIG_FILE = AUTOGRADER / "nbgrader_config.py"
SUBMISSIONS = AUTOGRADER / "submissions"           # sample submissions: <student>/<assignment>/<assignment>.ipynb
EXPECTED = AUTOGRADER / "expected"                 # which tests each sample must fail
CORPUS = AUTOGRADER / "corpus"                     # held-out answers for `make accuracy`
HINTS = AUTOGRADER / "hints"                       # known mistakes: how the tests fail, and the hint a student gets
TEMPLATES = AUTOGRADER / "authoring" / "templates"      # the offline slide deck's
FEEDBACK_TEMPLATES = AUTOGRADER / "grading" / "templates"  # the feedback page's
TYPICAL_SECONDS = AUTOGRADER / "grading" / "typical-seconds.json"  # each notebook's cells, for the first run's order
TA_NOTEBOOK = AUTOGRADER / "authoring" / "colab_grade.ipynb"
SANDBOX_SCRIPT = AUTOGRADER / "isolation" / "sandbox.py"
ZYGOTE_SCRIPT = AUTOGRADER / "execution" / "zygote.py"
