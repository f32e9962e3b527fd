"""Release -> grade the compact class end to end with real nbgrader and real kernels (tests/pipeline/compact_class.py).

Every sample in it loses exactly the points of its mistake; `make accuracy` checks the whole sample class.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from autograder.authoring.samples import expected_failures
from autograder.course import assignments
from autograder.grading.csv_cells import read_rows
from autograder.grading.results import STATUSES, autograded_cells
from tests.pipeline import compact_class
from tests.pipeline.compact_class import BROKEN, FILTER, SELECTED, samples
from tests.pipeline.conftest import tree_digest
from tests.pipeline.grader import copy_samples, run_grader

pytestmark = pytest.mark.pipeline
# Tests of the spine's behaviour use notebook 01 and the broken submissions: whole-class runs only.
whole_class = pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the graded class")


SAMPLES = [(student, assignment, expected_failures()[assignment][student]) for student, assignment in samples()]


@pytest.mark.parametrize("student,assignment,failing", SAMPLES, ids=[f"{s}-{a}" for s, a, _ in SAMPLES])
def test_each_sample_loses_exactly_the_points_of_its_mistake(graded, student, assignment, failing):
    rows = graded.rows(student, assignment)
    cells = dict(autograded_cells(assignments()[assignment]))
    assert set(rows) == set(cells), "one results row per test cell"
    failed = sorted(gid for gid, r in rows.items() if r["status"] != "passed")
    assert failed == sorted(failing), {gid: rows[gid]["message"] for gid in failed}
    for gid, row in rows.items():
        assert float(row["score"]) == (0.0 if gid in failing else cells[gid])
        assert float(row["max_score"]) == cells[gid]
    grade = graded.grade(student, assignment)
    assert float(grade["score"]) == sum(cells.values()) - sum(cells[g] for g in failing)
    assert float(grade["max_score"]) == sum(cells.values())


@pytest.mark.parametrize("assignment", SELECTED)
def test_blank_release_scores_zero_with_a_reason_on_every_test(graded, assignment):
    rows = graded.rows("blank", assignment)
    assert rows and all(float(r["score"]) == 0 and r["status"] != "passed" and r["message"] for r in rows.values())


def test_reference_notebook_runs_top_to_bottom_without_errors(graded):
    for assignment in SELECTED:
        nb = nbformat.read(graded.autograded("reference", assignment), 4)
        errors = [(c.id, o.ename) for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
        assert not errors, errors


def test_results_csv_has_the_documented_columns_and_statuses(graded):
    assert list(graded.results[0]) == ["student_id", "assignment", "grade_id", "device", "score", "max_score",
                                          "status", "message"]
    assert list(graded.grades[0]) == ["student_id", "assignment", "score", "max_score", "devices",
                                         "skipped_devices"]
    assert {r["status"] for r in graded.results} <= set(STATUSES)


@whole_class
def test_broken_submissions_get_error_rows_and_the_class_is_still_graded(graded):
    by_student = {}
    for row in graded.results:
        by_student.setdefault(row["student_id"], []).append(row)
    messages = {s: by_student[s][0]["message"] for s, *_ in BROKEN}
    assert "not valid JSON" in messages["broken_json"]
    assert "not a valid Jupyter notebook" in messages["broken_not_notebook"]
    assert "'99_nonexistent' is not an assignment" in messages["broken_unknown_assignment"]
    assert "no .ipynb file" in messages["broken_empty_folder"]
    for student, *_ in BROKEN:
        assert all(r["status"] == "error" and float(r["score"]) == 0 for r in by_student[student])
        assert f"cannot grade {student}/" in graded.stderr, "the TA is told on the terminal too"
    for assignment in {r["assignment"] for r in by_student["reference"]}:
        reference = graded.rows("reference", assignment)
        assert all(r["status"] == "passed" for r in reference.values()), (assignment, reference)


@whole_class
def test_submitted_files_are_never_modified(graded, class_dir, submitted_digest):
    assert tree_digest(class_dir) == submitted_digest


@whole_class
def test_feedback_shows_results_but_never_hidden_test_source(graded):
    source = nbformat.read(assignments()["01_tensors"], 4)
    hidden = set()
    for cell in source.cells:
        text = cell.source
        if "### BEGIN HIDDEN TESTS" in text:
            block = text.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            hidden |= {line.strip() for line in block.splitlines() if len(line.strip()) > 8}
    page = (graded.out / "feedback" / "seeded_ann" / "01_tensors" / "feedback.html").read_text()  # buggy_kernel_flip
    assert "10 / 12" in page and "test_conv_matches_torch" in page and "failed" in page
    assert "asymmetric filter is off" in page, "the failure message is what the student needs"
    leaked = [line for line in hidden if line in page]
    assert not leaked, leaked[:3]
    assert "Likely mistake:" in page and "cross-correlations" in page, "its failure is a known mistake's (hints.py)"


@whole_class
def test_known_mistakes_are_named_in_feedback_listed_and_counted_for_the_class(graded):
    found = {(r["student_id"], r["assignment"], r["mistake"]) for r in read_rows(graded.out / "mistakes.csv")}
    assert ("buggy_fma", "01_tensors", "multiply_add_as_one") in found
    assert not [f for f in found if f[0] == "reference"], "a submission that passed gets no hint"
    assert "Likely mistake" not in (graded.out / "feedback" / "reference" / "01_tensors" / "feedback.html").read_text()
    report = (graded.out / "report.html").read_text()
    assert "Likely mistakes" in report and "multiply_add_as_one" in report


@whole_class
def test_a_noisy_student_keeps_full_marks_and_the_noise_stays_out_of_the_test_cells(graded):
    """noisy_but_correct warns and prints on every call (nbgrader alone zeroes a test cell with stderr). 01's tests
    run in the judge, which drops what student code prints during a call: the test cells hold the judge's output."""
    nb = nbformat.read(graded.autograded("noisy_but_correct"), 4)
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    noise = [o for c in tests for o in c.outputs if "Warning" in o.get("text", "") or "debug:" in o.get("text", "")]
    assert tests and not noise, noise[:2]
    assert graded.failed("noisy_but_correct") == []


@whole_class
def test_a_process_a_submission_detaches_does_not_outlive_grading(graded):
    nb = nbformat.read(graded.autograded("hostile_leaves_process"), 4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    pid = int(text.split("left-behind pid:")[1].split()[0])
    cmdline = Path(f"/proc/{pid}/cmdline")
    assert not cmdline.exists() or b"sleep" not in cmdline.read_bytes(), f"pid {pid} (sleep 600) is still running"


@whole_class
def test_flooded_output_is_capped_and_said_so(graded):
    path = graded.autograded("hostile_floods_output")
    assert path.stat().st_size < 4 * 2**20, "the autograded notebook should keep about 1 MiB of output"
    assert "the grader dropped this cell's output" in path.read_text()


#: Hostile samples whose cost is a cell timeout: graded apart, with a short one (01's cells take at most ~4 s).
TIMEOUTS = ["hostile_infinite_loop", "hostile_ignores_interrupt"]


@pytest.fixture(scope="module")
def graded_timeouts(release, tmp_path_factory):
    class_dir = copy_samples(tmp_path_factory.mktemp("timeouts"), [(s, "01_tensors") for s in TIMEOUTS])
    return run_grader(class_dir, tmp_path_factory.mktemp("timeouts-grades"), "--assignments", "01_tensors",
                      "--cell-timeout", "10", workers=2)


@whole_class
def test_stuck_submissions_time_out_and_lose_only_what_did_not_run(graded_timeouts):
    for student in TIMEOUTS:
        assert graded_timeouts.failed(student) == sorted(expected_failures()["01_tensors"][student])

    def row(student, grade_id):
        return graded_timeouts.rows(student, "01_tensors")[grade_id]

    assert row("hostile_infinite_loop", "test_matmul_flops")["status"] == "timeout"
    assert row("hostile_ignores_interrupt", "test_peak_flops")["status"] == "timeout"
    assert "ignored the interrupt" in row("hostile_ignores_interrupt", "test_maxpool")["message"]


@whole_class
def test_hostile_submissions_are_reported_with_the_reason(graded):
    def row(student, grade_id):
        return graded.rows(student, "01_tensors")[grade_id]

    assert "kernel died" in row("hostile_kills_kernel", "test_to_numpy_plain")["message"]
    assert "not run" in row("hostile_kills_kernel", "test_maxpool")["message"]
    assert "MemoryError" in row("hostile_memory_bomb", "test_pairwise_values")["message"]


@whole_class
def test_student_code_reaches_no_secrets_and_no_network(graded):
    from autograder.isolation import sandbox

    if sandbox.unavailable_reason():
        pytest.skip(f"no sandbox on this machine: {sandbox.unavailable_reason()}")
    nb = nbformat.read(graded.autograded("hostile_snoops"), 4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "reached: []" in text, text[text.find("sees"):][:800]
    uid = re.search(r"uid (\d+) sees", text)
    assert uid and int(uid.group(1)) >= sandbox.KERNEL_UID_BASE, "student code runs as an unprivileged uid of its own"
    assert "unsandboxed" not in graded.stderr
    for shared in ("/dev/shm", "/tmp", "/var/tmp"):
        assert not Path(shared, "kit-hostile-snoops-leftover").exists(), f"a kernel's file outlived it in {shared}"
    for path in graded.out.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not [v for v in compact_class.PLANTED_SECRETS.values() if v.encode() in data], path
