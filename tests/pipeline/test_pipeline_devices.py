"""Grading on several devices without a GPU: the simulated accelerator "fakegpu" stands in for one.

The device-bug samples (autograder/submissions/buggy_device_*) pass every test on a CPU-only
grader; graded with --devices cpu,fakegpu,<a kind this machine lacks> each must fail exactly the
tests listed under [fakegpu] in autograder/expected/<assignment>.toml, on fakegpu only, with a
message that names the device, while the kind the machine lacks is reported skipped, never passed.
`make test` grades the reference and the first device-bug sample listed there; `make accuracy`, all of them.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

from autograder.authoring.samples import expected_device_failures
from autograder.course import assignments
from autograder.grading.results import autograded_cells
from dlkit.devices import resolve_devices
from tests.pipeline.compact_class import SELECTED
from tests.pipeline.grader import copy_samples, run_grader

pytestmark = pytest.mark.pipeline

#: The second device kind the device tests grade on; it exists on every machine (dlkit.fakegpu).
SIMULATED = "fakegpu"
#: A real device kind this machine lacks: requested anyway, it must come back "skipped".
ABSENT = next((k for k in ("cuda", "mps", "xla") if k not in resolve_devices("auto")), None)


def device_cases() -> list[tuple[str, str, list[str]]]:
    """The reference and the first device-bug sample of each assignment with a [fakegpu] table."""
    cases = []
    for assignment, per in expected_device_failures(SIMULATED).items():
        if assignment in SELECTED:
            bug = next(s for s, failing in per.items() if failing)
            cases += [(student, assignment, per[student]) for student in ("reference", bug) if student in per]
    return cases


CASES = device_cases()


@pytest.fixture(scope="module")
def graded_on_devices(release, tmp_path_factory):
    """CASES graded with --devices cpu,fakegpu,<absent>."""
    if not CASES:
        pytest.skip(f"no selected assignment lists [{SIMULATED}] expectations")
    class_dir = copy_samples(tmp_path_factory.mktemp("device_class"), [(s, a) for s, a, _ in CASES])
    devices = ",".join(["cpu", SIMULATED] + ([ABSENT] if ABSENT else []))
    return run_grader(class_dir, tmp_path_factory.mktemp("device_grades"), "--cell-timeout", "45",
                      "--devices", devices, "--assignments", ",".join(sorted({a for _, a, _ in CASES})))


def device_rows(graded, student, assignment) -> dict[str, dict[str, dict]]:
    """{grade_id: {device: row}} of one submission."""
    rows: dict[str, dict[str, dict]] = defaultdict(dict)
    for r in graded.results:
        if (r["student_id"], r["assignment"]) == (student, assignment):
            assert r["device"] not in rows[r["grade_id"]], f"two rows for {r['grade_id']} on {r['device']!r}"
            rows[r["grade_id"]][r["device"]] = r
    return rows


@pytest.mark.parametrize("student,assignment,failing", CASES, ids=[f"{s}-{a}" for s, a, _ in CASES])
def test_device_bugs_fail_on_the_accelerator_only(graded_on_devices, student, assignment, failing):
    rows = device_rows(graded_on_devices, student, assignment)
    cells = dict(autograded_cells(assignments()[assignment]))
    assert set(rows) == set(cells), "every test cell has rows"
    device_checked = [gid for gid, per in rows.items() if set(per) != {""}]
    assert set(failing) <= set(device_checked), "the tests aimed at a device bug must check devices"
    for gid, per in rows.items():
        if gid not in device_checked:
            assert per[""]["status"] == "passed", per[""]["message"]
            continue
        assert set(per) == {"cpu", SIMULATED} | ({ABSENT} if ABSENT else set()), f"{gid}: {sorted(per)}"
        assert per["cpu"]["status"] == "passed", f"{gid} must pass on the CPU: {per['cpu']['message']}"
        simulated = per[SIMULATED]
        if gid in failing:
            assert simulated["status"] == "failed", f"{gid} should fail on {SIMULATED}"
            assert simulated["message"].startswith(f"on {SIMULATED}:"), simulated["message"]
        else:
            assert simulated["status"] == "passed", f"{gid} on {SIMULATED}: {simulated['message']}"
        if ABSENT:
            assert per[ABSENT]["status"] == "skipped" and ABSENT in per[ABSENT]["message"]
        want = 0.0 if gid in failing else cells[gid]
        assert {float(r["score"]) for r in per.values()} == {want}, "each device row carries the cell's score"
    grade = graded_on_devices.grade(student, assignment)
    assert float(grade["score"]) == sum(cells.values()) - sum(cells[g] for g in failing), "each cell counted once"
    assert float(grade["max_score"]) == sum(cells.values())
    assert grade["devices"] == f"cpu+{SIMULATED}"
    assert grade["skipped_devices"] == (ABSENT or "")


def test_feedback_names_the_device_a_test_failed_on(graded_on_devices):
    student, assignment, failing = next((s, a, f) for s, a, f in CASES if f)
    page = (graded_on_devices.out / "feedback" / student / assignment / "feedback.html").read_text()
    assert f"{failing[0]} on {SIMULATED}" in page and f"{failing[0]} on cpu" in page
    assert f"on {SIMULATED}:" in page, "the student reads what went wrong on the accelerator"
    if ABSENT:
        assert "skipped" in page
