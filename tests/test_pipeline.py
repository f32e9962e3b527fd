"""Release -> grade a class end to end with real nbgrader and real kernels (see conftest.graded)."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_output
from nbgrader.utils import determine_grade

from autograder.authoring.samples import SUBMISSIONS, expected_failures
from autograder.course import assignments
from autograder.grading.preprocessors import KeepWarningsFromCostingPoints
from autograder.grading.results import STATUSES, autograded_cells

from .conftest import BROKEN, FILTER, SELECTED, tree_digest

pytestmark = pytest.mark.pipeline
# Tests of the spine's behaviour use notebook 01 and the broken submissions: whole-class runs only.
whole_class = pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the graded class")


def rows_of(graded, student, assignment):
    """{grade_id: row} of one submission; a test checked on several devices shows its worst device's row.

    Default grading visits every device kind the machine has (and the simulated accelerator where it
    has none): a test failed if any of its device rows failed; a skipped device is not a failure.
    """
    rank = {"passed": 0, "skipped": 1}
    found: dict[str, dict] = {}
    for r in graded["results"]:
        if (r["student_id"], r["assignment"]) == (student, assignment):
            kept = found.get(r["grade_id"])
            if kept is None or rank.get(r["status"], 2) > rank.get(kept["status"], 2):
                found[r["grade_id"]] = r
    return {gid: (dict(r, status="passed") if r["status"] == "skipped" else r) for gid, r in found.items()}


SAMPLES = [(student, assignment, failing) for assignment, per in expected_failures().items()
           for student, failing in per.items() if assignment in SELECTED]


def test_every_sample_submission_has_an_expected_outcome():
    on_disk = {(p.parent.parent.name, p.parent.name) for p in SUBMISSIONS.glob("*/*/*.ipynb")}
    assert {(s, a) for s, a in on_disk if a in SELECTED} == {(s, a) for s, a, _ in SAMPLES}


@pytest.mark.parametrize("student,assignment,failing", SAMPLES, ids=[f"{s}-{a}" for s, a, _ in SAMPLES])
def test_each_sample_loses_exactly_the_points_of_its_mistake(graded, student, assignment, failing):
    rows = rows_of(graded, student, assignment)
    cells = dict(autograded_cells(assignments()[assignment]))
    assert set(rows) == set(cells), "one results row per test cell"
    failed = sorted(gid for gid, r in rows.items() if r["status"] != "passed")
    assert failed == sorted(failing), {gid: rows[gid]["message"] for gid in failed}
    for gid, row in rows.items():
        assert float(row["score"]) == (0.0 if gid in failing else cells[gid])
        assert float(row["max_score"]) == cells[gid]
    grade = next(g for g in graded["grades"] if (g["student_id"], g["assignment"]) == (student, assignment))
    assert float(grade["score"]) == sum(cells.values()) - sum(cells[g] for g in failing)
    assert float(grade["max_score"]) == sum(cells.values())


@pytest.mark.parametrize("assignment", SELECTED)
def test_blank_release_scores_zero_with_a_reason_on_every_test(graded, assignment):
    rows = rows_of(graded, "blank", assignment)
    assert rows and all(float(r["score"]) == 0 and r["status"] != "passed" and r["message"] for r in rows.values())


def test_reference_notebook_runs_top_to_bottom_without_errors(graded):
    for assignment in SELECTED:
        nb = nbformat.read(graded["out"] / "autograded" / "reference" / assignment / f"{assignment}.ipynb", 4)
        errors = [(c.id, o.ename) for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
        assert not errors, errors


def test_results_csv_has_the_documented_columns_and_statuses(graded):
    assert list(graded["results"][0]) == ["student_id", "assignment", "grade_id", "device", "score", "max_score",
                                          "status", "message"]
    assert list(graded["grades"][0]) == ["student_id", "assignment", "score", "max_score", "devices",
                                         "skipped_devices"]
    assert {r["status"] for r in graded["results"]} <= set(STATUSES)


@whole_class
def test_broken_submissions_get_error_rows_and_the_class_is_still_graded(graded):
    by_student = {}
    for row in graded["results"]:
        by_student.setdefault(row["student_id"], []).append(row)
    messages = {s: by_student[s][0]["message"] for s, *_ in BROKEN}
    assert "not valid JSON" in messages["broken_json"]
    assert "not a valid Jupyter notebook" in messages["broken_not_notebook"]
    assert "'99_nonexistent' is not an assignment" in messages["broken_unknown_assignment"]
    assert "no .ipynb file" in messages["broken_empty_folder"]
    for student, *_ in BROKEN:
        assert all(r["status"] == "error" and float(r["score"]) == 0 for r in by_student[student])
        assert f"cannot grade {student}/" in graded["stderr"], "the TA is told on the terminal too"
    for assignment in {r["assignment"] for r in by_student["reference"]}:
        reference = rows_of(graded, "reference", assignment)
        assert all(r["status"] == "passed" for r in reference.values()), (assignment, reference)


@whole_class
def test_submitted_files_are_never_modified(graded):
    assert tree_digest(graded["class_dir"]) == graded["before"]


@whole_class
def test_feedback_shows_results_but_never_hidden_test_source(graded):
    source = nbformat.read(assignments()["01_tensors"], 4)
    hidden = set()
    for cell in source.cells:
        text = cell.source
        if "### BEGIN HIDDEN TESTS" in text:
            block = text.split("### BEGIN HIDDEN TESTS")[1].split("### END HIDDEN TESTS")[0]
            hidden |= {line.strip() for line in block.splitlines() if len(line.strip()) > 8}
    page = (graded["out"] / "feedback" / "buggy_kernel_flip" / "01_tensors" / "feedback.html").read_text()
    assert "10 / 12" in page and "test_conv_matches_torch" in page and "failed" in page
    assert "asymmetric filter is off" in page, "the failure message is what the student needs"
    leaked = [line for line in hidden if line in page]
    assert not leaked, leaked[:3]


def test_warnings_on_stderr_keep_a_passing_tests_points():
    # nbgrader on its own: a passing test cell that printed to stderr scores 0.
    cell = new_code_cell("check()", metadata={"nbgrader": {"grade": True, "grade_id": "t", "points": 2,
                                                            "solution": False, "locked": True}})
    cell.outputs = [new_output("stream", name="stderr", text="DeprecationWarning: old API\n")]
    assert determine_grade(cell) == (0, 2)
    cell, _ = KeepWarningsFromCostingPoints().preprocess_cell(cell, {}, 0)
    assert determine_grade(cell) == (2, 2)
    # A real failure still fails.
    cell.outputs.append(new_output("error", ename="AssertionError", evalue="off", traceback=[]))
    assert determine_grade(cell) == (0, 2)


@whole_class
def test_noisy_student_really_wrote_to_stderr_in_graded_tests(graded):
    nb = nbformat.read(graded["out"] / "autograded" / "noisy_but_correct" / "01_tensors" / "01_tensors.ipynb", 4)
    noisy = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")
             and any("Warning" in o.get("text", "") or "debug:" in o.get("text", "") for o in c.outputs)]
    assert len(noisy) >= 3, "the sample must exercise warnings inside graded test cells"


def autograded(graded, student, assignment="01_tensors"):
    return graded["out"] / "autograded" / student / assignment / f"{assignment}.ipynb"


@whole_class
def test_a_process_a_submission_detaches_does_not_outlive_grading(graded):
    nb = nbformat.read(autograded(graded, "hostile_leaves_process"), 4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    pid = int(text.split("left-behind pid:")[1].split()[0])
    cmdline = Path(f"/proc/{pid}/cmdline")
    assert not cmdline.exists() or b"sleep" not in cmdline.read_bytes(), f"pid {pid} (sleep 600) is still running"


@whole_class
def test_flooded_output_is_capped_and_said_so(graded):
    path = autograded(graded, "hostile_floods_output")
    assert path.stat().st_size < 4 * 2**20, "the autograded notebook should keep about 1 MiB of output"
    assert "the grader dropped this cell's output" in path.read_text()


@whole_class
def test_hostile_submissions_are_reported_with_the_reason(graded):
    def row(student, grade_id):
        return rows_of(graded, student, "01_tensors")[grade_id]

    assert row("hostile_infinite_loop", "test_matmul_flops")["status"] == "timeout"
    assert row("hostile_ignores_interrupt", "test_peak_flops")["status"] == "timeout"
    assert "ignored the interrupt" in row("hostile_ignores_interrupt", "test_maxpool")["message"]
    assert "kernel died" in row("hostile_kills_kernel", "test_to_numpy_plain")["message"]
    assert "not run" in row("hostile_kills_kernel", "test_maxpool")["message"]
    assert "MemoryError" in row("hostile_memory_bomb", "test_pairwise_values")["message"]


@whole_class
def test_student_code_reaches_no_secrets_and_no_network(graded):
    from autograder.isolation import sandbox

    if sandbox.unavailable_reason():
        pytest.skip(f"no sandbox on this machine: {sandbox.unavailable_reason()}")
    nb = nbformat.read(autograded(graded, "hostile_snoops"), 4)
    text = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
    assert "reached: []" in text, text[text.find("reached"):][:500]
    uid = re.search(r"uid (\d+) reached", text)
    assert uid and int(uid.group(1)) >= sandbox.KERNEL_UID_BASE, "student code runs as an unprivileged uid of its own"
    assert "without isolation" not in graded["stderr"]
