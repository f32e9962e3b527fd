"""One call that makes a notebook's random numbers repeatable."""

from __future__ import annotations

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
