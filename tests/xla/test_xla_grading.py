"""The real grader with --devices cpu,xla on torch_xla's CPU-backed xla device: `make test-xla` only.

Grades what the [xla] tables of autograder/expected/*.toml list (the reference of every notebook
that imports torch, and 01's device-bug samples) and checks: full marks for the references, with
xla rows that ran (TensorFlow's tests show xla skipped: TPUStrategy needs a TPU); each sample
fails exactly the tests listed, and a device bug fails on xla while passing on the CPU.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections import defaultdict

import pytest

pytest.importorskip("torch_xla")

from autograder.authoring.samples import SUBMISSIONS, expected_device_failures  # noqa: E402
from autograder.course import assignments  # noqa: E402
from autograder.grading.results import autograded_cells  # noqa: E402
from autograder.paths import REPO  # noqa: E402
from autograder.verify.gpu_check import imports  # noqa: E402

from ..conftest import read_csv  # noqa: E402

pytestmark = [pytest.mark.pipeline,
              pytest.mark.skipif(os.environ.get("PJRT_DEVICE", "").upper() != "CPU", reason="needs PJRT_DEVICE=CPU")]

EXPECTED = expected_device_failures("xla")
#: Samples whose bug is on the device: the tests they fail must fail on xla and pass on the CPU.
DEVICE_BUGS = ("buggy_device_no_device_arg", "buggy_device_numpy")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    class_dir = tmp_path_factory.mktemp("xla_class")
    for assignment, per in EXPECTED.items():
        for student in per:
            shutil.copytree(SUBMISSIONS / student / assignment, class_dir / student / assignment)
    out = tmp_path_factory.mktemp("xla_grades")
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--workers", "2",
                           "--cell-timeout", "120", "--devices", "cpu,xla", "--assignments", ",".join(EXPECTED)],
                          cwd=REPO, capture_output=True, text=True, timeout=3000)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows: dict[tuple[str, str], dict[str, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for r in read_csv(out / "results.csv"):
        rows[r["student_id"], r["assignment"]][r["grade_id"]][r["device"]] = r
    grades = {(g["student_id"], g["assignment"]): g for g in read_csv(out / "grades.csv")}
    return rows, grades


def test_every_notebook_that_imports_torch_is_covered():
    torch_notebooks = {name for name, path in assignments().items() if imports(path, "torch")}
    assert torch_notebooks <= set(EXPECTED), "each needs an [xla] table with its reference"


CASES = [(s, a, failing) for a, per in EXPECTED.items() for s, failing in per.items()]


@pytest.mark.parametrize("student,assignment,failing", CASES, ids=[f"{s}-{a}" for s, a, _ in CASES])
def test_graded_on_xla_as_expected(graded, student, assignment, failing):
    rows, grades = graded
    per_test = rows[student, assignment]
    not_passed = {gid for gid, per in per_test.items()
                  if any(r["status"] not in ("passed", "skipped") for r in per.values())}
    problems = {gid: {d: r["message"][:300] for d, r in per.items() if r["status"] not in ("passed", "skipped")}
                for gid, per in per_test.items() if gid in not_passed - set(failing)}
    assert not_passed == set(failing), problems
    tf_only = imports(assignments()[assignment], "tensorflow") and not any(
        "xla" in per and per["xla"]["status"] != "skipped" for per in per_test.values())
    grade = grades[student, assignment]
    cells = dict(autograded_cells(assignments()[assignment]))
    assert float(grade["score"]) == sum(cells.values()) - sum(cells[g] for g in failing)
    if tf_only:  # 05: every device test is TensorFlow's, and TPUStrategy needs a real TPU
        xla_rows = [per["xla"] for per in per_test.values() if "xla" in per]
        assert xla_rows and all("TPUStrategy, which needs a TPU" in r["message"] for r in xla_rows)
    elif any("xla" in per for per in per_test.values()):  # 02 has no device-checked test: cpu alone
        assert "xla" in grade["devices"].split("+"), grade
    if student in DEVICE_BUGS:
        for gid in failing:
            assert per_test[gid]["cpu"]["status"] == "passed", per_test[gid]["cpu"]["message"]
            assert per_test[gid]["xla"]["status"] == "failed"
            assert per_test[gid]["xla"]["message"].startswith("on xla:")
