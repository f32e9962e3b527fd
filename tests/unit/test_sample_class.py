"""make accuracy's verdict on the sample submissions (autograder/verify/sample_class.py), on hand-made result rows."""

from __future__ import annotations

from autograder.authoring.samples import expected_failures
from autograder.course import assignments
from autograder.grading.results import CellResult, autograded_cells
from autograder.verify.sample_class import BLANK, judge_samples, sample_table

ASSIGNMENT = "01_tensors"
CELLS = dict(autograded_cells(assignments()[ASSIGNMENT]))


def rows_for(student: str, failing: set[str], devices: tuple[str, ...] = ("",)) -> list[CellResult]:
    """What the grader writes for a submission that fails exactly `failing` (every device row of a cell alike)."""
    return [CellResult(student, ASSIGNMENT, gid, 0.0 if gid in failing else points, points,
                       "failed" if gid in failing else "passed", "wrong" if gid in failing else "", device)
            for gid, points in CELLS.items() for device in devices]


def blank_rows() -> list[CellResult]:
    return [CellResult(BLANK, ASSIGNMENT, gid, 0.0, points, "error", "NotImplementedError")
            for gid, points in CELLS.items()]


def verdicts_for(rows: list[CellResult], student: str) -> dict[str, bool]:
    return {v.student: v.agrees for v in judge_samples(rows + blank_rows(), [(student, ASSIGNMENT)])}


def test_a_sample_failing_exactly_its_listed_tests_agrees():
    student, failing = next((s, f) for s, f in expected_failures()[ASSIGNMENT].items() if f)
    assert verdicts_for(rows_for(student, set(failing)), student) == {student: True, BLANK: True}


def test_a_sample_that_fails_one_test_too_many_or_too_few_disagrees():
    student, failing = next((s, f) for s, f in expected_failures()[ASSIGNMENT].items() if f)
    extra = next(gid for gid in CELLS if gid not in failing)
    assert verdicts_for(rows_for(student, set(failing) | {extra}), student)[student] is False
    assert verdicts_for(rows_for(student, set(failing[1:])), student)[student] is False


def test_a_failure_on_one_device_row_counts_and_a_skipped_row_does_not():
    student, failing = next((s, f) for s, f in expected_failures()[ASSIGNMENT].items() if f)
    rows = rows_for(student, set(), devices=("cpu", "fakegpu"))
    rows = [r if not (r.grade_id in failing and r.device == "fakegpu") else
            CellResult(r.student_id, r.assignment, r.grade_id, 0.0, r.max_score, "failed", "on fakegpu: x", r.device)
            for r in rows]
    rows = [CellResult(r.student_id, r.assignment, r.grade_id, 0.0 if r.grade_id in failing else r.score, r.max_score,
                       r.status, r.message, r.device) for r in rows]
    untouched = next(gid for gid in CELLS if gid not in failing)
    rows += [CellResult(student, ASSIGNMENT, untouched, CELLS[untouched], CELLS[untouched], "skipped", "no cuda",
                        "cuda")]
    assert verdicts_for(rows, student)[student] is True


def test_a_blank_release_with_a_passing_test_or_no_reason_disagrees_and_the_table_says_so():
    student = "reference"
    rows = rows_for(student, set())
    blank = blank_rows()
    blank[0] = CellResult(BLANK, ASSIGNMENT, blank[0].grade_id, 0.0, blank[0].max_score, "failed", "")
    verdicts = judge_samples(rows + blank, [(student, ASSIGNMENT)])
    assert {v.student: v.agrees for v in verdicts} == {student: True, BLANK: False}
    assert "| 01_tensors | 1/1 | NO |" in sample_table(verdicts)


def test_an_unlisted_or_ungraded_sample_disagrees():
    assert verdicts_for([], "reference")["reference"] is False
    assert verdicts_for(rows_for("nobody_listed", set()), "nobody_listed")["nobody_listed"] is False


def test_the_accuracy_report_ends_with_every_disagreement():
    """CI keeps only a log's tail: the report's last section names each disagreeing sample and corpus answer."""
    from autograder.verify.accuracy import Entry, verdict_summary

    student, failing = next((s, f) for s, f in expected_failures()[ASSIGNMENT].items() if f)
    samples = judge_samples(rows_for(student, set()) + blank_rows(), [(student, ASSIGNMENT)])
    entry = Entry(ASSIGNMENT, "wrong", "matmul_flops", "counts an FMA as one", {})
    summary = verdict_summary([(entry, False, "kept full marks on its exercise")], samples, True, True)
    assert summary.startswith("## Verdict")
    assert f"sample: {student}/{ASSIGNMENT}" in summary and "counts an FMA as one" in summary
    agreeing = judge_samples(rows_for(student, set(failing)) + blank_rows(), [(student, ASSIGNMENT)])
    assert "Everything agrees." in verdict_summary([(entry, True, "")], agreeing, True, True)
