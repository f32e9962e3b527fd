"""The repository passes `ruff check .` (pyflakes, pycodestyle, import order; configured in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys

from autograder.paths import REPO


def test_ruff_finds_nothing():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr
