"""Shared fixtures: one release build and one graded class for every pipeline test.

Grading is the slow part (real kernels), so the whole sample class, the blank release and
a handful of broken submissions are graded once per test session and inspected by many tests.
"""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.authoring.release import build_release
from autograder.authoring.samples import SUBMISSIONS, expected_device_failures
from autograder.course import assignments
from autograder.paths import REPO
from dlkit.devices import resolve_devices

# Broken submissions added to the sample class: (student, assignment folder, file name, content).
BROKEN = [
    ("broken_json", "01_tensors", "01_tensors.ipynb", '{"cells": [ {"cell_type": "code", '),
    ("broken_not_notebook", "01_tensors", "01_tensors.ipynb", '{"hello": "world"}'),
    ("broken_unknown_assignment", "99_nonexistent", "99_nonexistent.ipynb", "{}"),
    ("broken_empty_folder", "01_tensors", None, None),
]


# KIT_ASSIGNMENTS=02_backprop limits the pipeline tests to some assignments while authoring one;
# `make test` and CI grade them all.
FILTER = [a for a in os.environ.get("KIT_ASSIGNMENTS", "").split(",") if a]
SELECTED = FILTER or list(assignments())


@pytest.fixture(scope="session")
def release() -> dict[str, Path]:
    return build_release()


def read_csv(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def graded(release, tmp_path_factory):
    """Grade the sample submissions, the blank release and the broken submissions, as `make grade` would."""
    class_dir = tmp_path_factory.mktemp("class")
    shutil.copytree(SUBMISSIONS, class_dir, dirs_exist_ok=True)
    for student, folder, name, content in BROKEN:
        target = class_dir / student / folder
        target.mkdir(parents=True)
        if name:
            (target / name).write_text(content)
    before = tree_digest(class_dir)
    out = tmp_path_factory.mktemp("grades")
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--with-blank",
                           "--workers", "2", "--cell-timeout", "45"] + (["--assignments", ",".join(FILTER)] if FILTER else []), cwd=REPO, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"out": out, "class_dir": class_dir, "before": before, "stdout": proc.stdout, "stderr": proc.stderr,
            "results": read_csv(out / "results.csv"), "grades": read_csv(out / "grades.csv")}


#: The second device kind the device tests grade on; it exists on every machine (dlkit.fakegpu).
SIMULATED = "fakegpu"
#: A real device kind this machine lacks: requested anyway, it must come back "skipped".
ABSENT = next((k for k in ("cuda", "mps", "xla") if k not in resolve_devices("auto")), None)


@pytest.fixture(scope="session")
def graded_on_devices(release, tmp_path_factory):
    """Grade the samples listed under [fakegpu] in autograder/expected with --devices cpu,fakegpu,<absent>.

    Kept small (a few submissions of the selected assignments) because every kernel start costs seconds.
    """
    wanted = {a: per for a, per in expected_device_failures(SIMULATED).items() if a in SELECTED}
    if not wanted:
        pytest.skip(f"no selected assignment lists [{SIMULATED}] expectations")
    class_dir = tmp_path_factory.mktemp("device_class")
    for assignment, per in wanted.items():
        for student in per:
            shutil.copytree(SUBMISSIONS / student / assignment, class_dir / student / assignment)
    out = tmp_path_factory.mktemp("device_grades")
    devices = ",".join(["cpu", SIMULATED] + ([ABSENT] if ABSENT else []))
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--workers", "2",
                           "--cell-timeout", "45", "--devices", devices, "--assignments", ",".join(wanted)],
                          cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"out": out, "expected": wanted, "results": read_csv(out / "results.csv"),
            "grades": read_csv(out / "grades.csv")}
