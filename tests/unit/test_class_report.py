"""The class report, built from a results.csv written here: aggregated for 1,000 students, self-contained,
failure messages grouped across students, every status counted, timings used when recorded."""

from __future__ import annotations

import contextlib
import csv
import html
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from autograder.grading.class_report import build_report, group_messages, message_group
from autograder.grading.engines import spare_cpu_process
from autograder.grading.results import CellResult
from autograder.paths import REPO

STUDENTS = 1000
TESTS = [("test_add", 2.0), ("test_matmul", 3.0), ("test_conv", 3.0), ("test_pool", 2.0)]
SEED = "[inputs: dlkit.seed_everything({})]"


def synthetic_class(students: int = STUDENTS) -> list[CellResult]:
    """A class where test_conv fails most often (a third of the students, with per-student numbers),
    test_pool fails on one device only, and a few submissions error, time out or tamper."""
    rows = []
    for i in range(students):
        sid = f"s{i:04d}"
        for grade_id, points in TESTS:
            for device in ("cpu", "fakegpu"):
                status, message = "passed", ""
                if grade_id == "test_conv" and i % 3 == 0:
                    status = "failed"
                    message = (f"conv2d output is off at index [0, {i % 5}]: got {i * 0.37:.3f}, expected 1.25 "
                               f"{SEED.format(10_000 + i)}")
                elif grade_id == "test_matmul" and i % 10 == 0:
                    status, message = "error", (f"RuntimeError: mat1 and mat2 shapes cannot be multiplied "
                                                f"(4x{i % 7 + 1} and 3x4) {SEED.format(i)}")
                elif grade_id == "test_pool" and device == "fakegpu" and i % 4 == 0:
                    status, message = "failed", f"maxpool2d returned a tensor on cpu, expected fakegpu {SEED.format(i)}"
                elif grade_id == "test_add" and i % 100 == 1:
                    status, message = "timeout", "the cell ran past the time limit of 60 s"
                elif grade_id == "test_add" and i % 250 == 2:
                    status, message = "tampered", "tampered: torch.allclose was replaced"
                failed_somewhere = status != "passed" or (grade_id == "test_pool" and i % 4 == 0)
                rows.append(CellResult(sid, "01_tensors", grade_id, 0.0 if failed_somewhere else points, points,
                                       status, message, device))
        rows.append(CellResult(sid, "02_backprop", "test_svm_loss", 2.0 if i % 2 else 0.0, 2.0,
                               "passed" if i % 2 else "failed", "" if i % 2 else f"loss is off: got {i}", ""))
    return rows


def write_results(out: Path, rows: list[CellResult]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=CellResult.columns())
        writer.writeheader()
        writer.writerows(r.as_row() for r in rows)


def visible_text(page: str) -> str:
    """The page as a reader sees it: no style, no tags, entities decoded, whitespace collapsed."""
    text = html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<style>.*?</style>", "", page, flags=re.S)))
    return re.sub(r"\s+", " ", text)


@pytest.fixture(scope="module")
def big_report(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("class1000")
    write_results(out, synthetic_class())
    started = time.perf_counter()
    path = build_report(out)
    return {"out": out, "page": path.read_text(encoding="utf-8"), "seconds": time.perf_counter() - started}


def test_messages_of_one_mistake_group_together_without_the_students_numbers():
    messages = [f"got {v}, expected 1.25 for shape (4, 3) [inputs: dlkit.seed_everything({s})]"
                for v, s in [(0.5, 11), (2.0, 22), (0.5, 33)]]
    assert len({message_group(m) for m in messages}) == 1
    assert group_messages(messages + ["NameError: name 'x' is not defined"]) == [
        ("got #, expected 1.25 for shape (4, 3)", 3), ("NameError: name 'x' is not defined", 1)]


def test_report_of_1000_students_is_aggregated_self_contained_and_quick(big_report):
    page, text = big_report["page"], visible_text(big_report["page"])
    assert big_report["seconds"] < 30, f"building the report took {big_report['seconds']:.1f} s"
    assert len(page) < 1_000_000, f"{len(page)} bytes: a class of 1,000 should not make the page long"
    assert "s0123" not in text, "the report aggregates: no row per student"
    assert page.count("data:image/png;base64,") >= 4, "histograms and bar charts are embedded"
    assert not re.search(r'(src|href)="(https?:)?//', page), "nothing is fetched from the network"
    assert "<script" not in page
    assert "1000 students" in text and "01_tensors" in text and "02_backprop" in text


def test_ranking_pass_rates_and_grouped_messages(big_report):
    section = visible_text(big_report["page"]).split("02_backprop Scores")[0]
    ranked = section.split("Exercises ranked")[1].split("Pass rate")[0]
    order = [ranked.index(t) for t in ("test_conv", "test_pool", "test_matmul", "test_add")]
    assert order == sorted(order), "test_conv (334 students) > test_pool (250) > test_matmul (100) > test_add (14)"
    assert re.search(r"test_conv\s+334\s+33%", ranked)
    rates = section.split("Pass rate")[1]
    assert re.search(r"test_pool\s+100%\s+\(1000/1000\)\s+75%\s+\(750/1000\)", rates), "per-device pass rate"
    assert re.search(r"334\s+×\s+cpu:\s+conv2d output is off at index \[0, #\]: got #, expected 1.25", rates)
    assert "seed_everything" not in rates, "the per-student seed suffix is stripped before grouping"
    assert re.search(r"250\s+×\s+fakegpu:\s+maxpool2d returned a tensor on cpu", rates)


def test_error_timeout_and_tampered_are_counted(big_report):
    counts = visible_text(big_report["page"]).split("Errors, timeouts")[1].split("Time per submission")[0]
    assert re.search(r"error\s+200\s+100\b", counts), "100 students x test_matmul x 2 devices"
    assert re.search(r"timeout\s+20\s+10\b", counts)
    assert re.search(r"tampered\s+8\s+4\b", counts)
    assert "not recorded" in visible_text(big_report["page"]), "no timings.csv: said so"


def test_timings_are_used_when_recorded_and_the_cli_rebuilds_an_old_run(tmp_path):
    write_results(tmp_path, synthetic_class(20))
    with open(tmp_path / "timings.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student_id", "assignment", "seconds", "executing_seconds", "overhead_seconds"])
        writer.writerows([f"s{i:04d}", "01_tensors", f"{10 + i}.000", "5.000", f"{5 + i}.000"] for i in range(20))
    proc = subprocess.run([sys.executable, "-m", "autograder.grading.class_report", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = visible_text((tmp_path / "report.html").read_text(encoding="utf-8"))
    tensors, backprop = text.split("02_backprop Scores")
    assert re.search(r"submissions timed.*?20\s+19\.5\s+28\.0\s+29\.0", tensors.split("Time per submission")[1])
    assert "not recorded" in backprop, "an assignment without timings says so"


@pytest.mark.parametrize("on_spare_cpu", [False, True], ids=["in the driver", "in a nice-19 process"])
def test_sections_built_as_assignments_finish_make_the_page_a_rebuild_makes(tmp_path, on_spare_cpu):
    """A run builds each assignment's section when its last submission is graded (pipeline.ReportSections), in a
    process at the lowest priority (engines.spare_cpu_process); the page must be the one
    `python -m autograder.grading.class_report OUT` rebuilds from the files."""
    with contextlib.ExitStack() as stack:
        builder = None
        if on_spare_cpu:
            builder = stack.enter_context(spare_cpu_process())
            assert builder.submit(os.nice, 0).result() == 19, "it takes only the CPU the kernels leave"
        _check_sections(tmp_path, builder)


def _check_sections(tmp_path, builder) -> None:
    from autograder.grading.intake import Submission
    from autograder.grading.pipeline import ReportSections
    from autograder.grading.report import Timing, write_csvs, write_timings

    rows = synthetic_class(students=12)
    resumed = [r for r in rows if r.student_id == "s0000"]  # graded by an earlier run
    by_submission: dict[tuple[str, str], list[CellResult]] = {}
    for r in rows:
        if r.student_id != "s0000":
            by_submission.setdefault((r.student_id, r.assignment), []).append(r)
    todo = [Submission(student, assignment, tmp_path / "unused.ipynb") for student, assignment in by_submission]
    sections = ReportSections(resumed, todo, builder)
    timings = []
    for i, ((student, assignment), submission_rows) in enumerate(reversed(by_submission.items())):
        timings.append(Timing(student, assignment, 1.0 + i / 7, 0.5 + i / 11))  # not rounded to the millisecond
        sections.add(submission_rows, timings[-1])
        if (student, assignment) == ("s0001", "02_backprop"):  # the last of 02's submissions, before 01's
            assert set(sections.built) | set(sections.building) == {"02_backprop"}, \
                "a finished assignment's section is built at once"
    graded = [r for submission_rows in reversed(by_submission.values()) for r in submission_rows]
    write_csvs(tmp_path, resumed + graded)
    write_timings(tmp_path, timings)
    during_the_run = sections.write(tmp_path, resumed + graded).read_text(encoding="utf-8")
    assert visible_text(during_the_run).count("submissions timed") == 2, "both sections show this run's timings"
    assert during_the_run == build_report(tmp_path).read_text(encoding="utf-8")


def test_names_are_data_in_the_reports_figures_and_tables(tmp_path):
    """Folder names a student chose, maths and HTML among them, are drawn and shown as the text they are."""
    names = ["01_tensors$$", "$x^{2$ {0} %s", '<script>alert("a")</script>\\x0a']
    rows = [CellResult(f"s{i}", name, "test_a", 0.0, 1.0, "error", f"{name!r} is not an assignment of this course")
            for i, name in enumerate(names)]
    rows.append(CellResult("s9", "01_tensors", "$\\frac{a}{$", 0.0, 1.0, "failed", "<b>off</b>"))
    write_results(tmp_path, rows)
    page = build_report(tmp_path).read_text(encoding="utf-8")
    assert "<script>" not in page and "<b>off</b>" not in page
    assert all(html.escape(name) in page for name in names)
