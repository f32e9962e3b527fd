"""One call that makes a notebook's random numbers repeatable."""

from __future__ import annotations

import hashlib
import os
import random
import sys

import numpy as np


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy, and torch and TensorFlow when the notebook has imported them.

    Frameworks the notebook has not imported are left alone: importing TensorFlow only to seed
    it would cost a notebook that never uses it several seconds.
    """
    random.seed(seed)
    np.random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)  # seeds every device, CUDA included
    if "tensorflow" in sys.modules:
        sys.modules["tensorflow"].random.set_seed(seed)


#: What the grader prints at the top of each test cell; results.py adds the seed to a failure message.
SEED_MARKER = "[dlkit-seed]"


def seed_for(student: str, assignment: str, test: str) -> int:
    """The seed of one hidden test's random inputs for one student: fixed per student, assignment and test.

    A regrade draws the same inputs (the same score, a reproducible failure), while two students
    get different ones (nobody can hard-code another student's failing case).
    """
    digest = hashlib.sha256(f"{student}\0{assignment}\0{test}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def seed_test(seed: int) -> None:
    """Seed every generator before a test cell runs, and say so for the failure message."""
    seed_everything(seed)
    print(f"{SEED_MARKER} {seed}")
