"""Grades into an LMS: canvas.csv, moodle.csv and grades-by-student.csv from a class gradebook, each checked against
the columns its format documents; the same files from `python -m autograder.grading.export` and `nbgrader export`.

The gradebook is written by the kit's own gradebook.py from rows made here (no grading run): ada loses one
test of 01, bo has full marks and a TA's manual score, a student who named their folder like a formula,
and cy, who is on the roster but handed nothing in.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from autograder.grading.export import ClassGrades, read_gradebook, read_roster, write_exports
from autograder.grading.gradebook import write_class_gradebook
from autograder.grading.results import CellResult, autograded_cells
from autograder.paths import BUILD, REPO

ROSTER = """student_id,name,canvas_id,sis_user_id,sis_login_id,section,email
ada,"Lovelace, Ada",101,S-1,ada.l,A,ada@example.org
bo,"Bo, Bea",102,,,B,bo@example.org
=cmd|' /C calc'!A0,"=HYPERLINK(""http://x"")",103,,,A,eve@example.org
cy,"Young, Cy",,,cy.y,,
"""
ITEMS = "assignment,name,canvas_id\n01_tensors,Lab 1: tensors,4711\n"


def rows_for(student: str, assignment: str, failing: set[str] = frozenset()) -> list[CellResult]:
    cells = autograded_cells(BUILD / "source" / assignment / f"{assignment}.ipynb")
    return [CellResult(student, assignment, gid, 0.0 if gid in failing else pts, pts,
                       "failed" if gid in failing else "passed", "") for gid, pts in cells]


@pytest.fixture
def graded(release, tmp_path) -> Path:
    """OUT with a class gradebook: 01 for ada (one test lost), bo (a TA gave 0.5 on one test) and the formula
    student; 02 for ada only."""
    out = tmp_path / "out"
    out.mkdir()
    url = f"sqlite:///{out / 'gradebook.db'}"
    rows = (rows_for("ada", "01_tensors", {"test_matmul_flops"}) + rows_for("bo", "01_tensors")
            + rows_for("=cmd|' /C calc'!A0", "01_tensors") + rows_for("ada", "02_backprop", {"test_svm_loss"}))
    write_class_gradebook(url, rows)
    with Gradebook(url) as gb:
        gb.find_grade("test_peak_flops", "01_tensors", "01_tensors", "bo").manual_score = 0.5
        gb.db.commit()
    (tmp_path / "roster.csv").write_text(ROSTER, encoding="utf-8")
    (tmp_path / "items.csv").write_text(ITEMS, encoding="utf-8")
    return out


def read(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def grades_of(out: Path) -> ClassGrades:
    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        return read_gradebook(gb)


def test_scores_come_from_the_gradebook_with_the_tas_manual_scores(graded):
    grades = grades_of(graded)
    assert grades.points == {"01_tensors": 12, "02_backprop": 16}
    assert grades.scores["ada"] == {"01_tensors": 11, "02_backprop": 14}  # test_svm_loss: 2 of 4
    assert grades.scores["bo"] == {"01_tensors": 11.5}  # peak_flops's 1 point overridden to 0.5 in formgrader
    assert grades.exercise_scores["ada"][("01_tensors", "matmul_flops")] == 0
    assert sum(grades.exercise_points["01_tensors"].values()) == 12
    assert list(grades.exercise_points["01_tensors"])[:2] == ["matmul_flops", "peak_flops"]  # the notebook's order


def test_a_late_penalty_is_subtracted_from_the_assignment_never_below_zero(graded):
    """As nbgrader's own export: a penalty the formgrader recorded (due dates) lowers the assignment's score."""
    with Gradebook(f"sqlite:///{graded / 'gradebook.db'}") as gb:
        gb.find_submission_notebook("02_backprop", "02_backprop", "ada").late_submission_penalty = 3.5
        gb.find_submission_notebook("01_tensors", "01_tensors", "bo").late_submission_penalty = 50
        gb.db.commit()
    grades = grades_of(graded)
    assert grades.scores["ada"] == {"01_tensors": 11, "02_backprop": 10.5}
    assert grades.scores["bo"] == {"01_tensors": 0}
    assert grades.exercise_scores["ada"][("02_backprop", "sigmoid_neuron")] == 2  # exercises: the tests' own scores


def test_canvas_file_has_the_gradebook_import_columns_and_a_points_possible_row(graded, tmp_path):
    written, notes = write_exports(tmp_path / "lms", grades_of(graded), read_roster(tmp_path / "roster.csv"),
                                   {"01_tensors": {"name": "Lab 1: tensors", "canvas_id": "4711"}})
    header, points, *students = read(tmp_path / "lms" / "canvas.csv")
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 1: tensors (4711)", "02_backprop"]
    assert points == ["Points Possible", "", "", "", "", "12", "16"]
    by_id = {row[1] or row[3]: row for row in students}
    assert by_id["101"] == ["Lovelace, Ada", "101", "S-1", "ada.l", "A", "11", "14"]
    assert by_id["102"] == ["Bo, Bea", "102", "", "", "B", "11.5", ""]  # nothing handed in for 02: left as it is
    assert by_id["cy.y"] == ["Young, Cy", "", "", "cy.y", "", "", ""]
    assert by_id["103"][0] == "'=HYPERLINK(\"http://x\")"  # a name from the LMS stays text in a spreadsheet
    assert tmp_path / "lms" / "canvas.csv" in written


def test_moodle_file_has_one_identifier_column_then_one_per_grade_item(graded, tmp_path):
    _, notes = write_exports(tmp_path / "lms", grades_of(graded), read_roster(tmp_path / "roster.csv"), {})
    header, *rows = read(tmp_path / "lms" / "moodle.csv")
    assert header == ["Email address", "01_tensors", "02_backprop"]
    assert sorted(rows) == [["ada@example.org", "11", "14"], ["bo@example.org", "11.5", ""],
                            ["eve@example.org", "12", ""]]
    assert "moodle.csv: cy has no email in the roster" in notes


def test_moodle_falls_back_to_the_id_number(graded, tmp_path):
    (tmp_path / "ids.csv").write_text("student_id,id_number\nada,A-17\nbo,B-2\n", encoding="utf-8")
    write_exports(tmp_path / "lms", grades_of(graded), read_roster(tmp_path / "ids.csv"), {})
    assert read(tmp_path / "lms" / "moodle.csv")[:2] == [["ID number", "01_tensors", "02_backprop"],
                                                        ["A-17", "11", "14"]]


def test_plain_file_has_one_column_per_assignment_and_per_exercise(graded, tmp_path):
    grades = grades_of(graded)
    _, notes = write_exports(tmp_path / "lms", grades, read_roster(tmp_path / "roster.csv"), {})
    header, points, *rows = read(tmp_path / "lms" / "grades-by-student.csv")
    exercises = {a: [f"{a}/{e}" for e in grades.exercise_points[a]] for a in grades.points}
    assert header == ["student_id", "name", "canvas_id", "sis_user_id", "sis_login_id", "section", "email",
                      "01_tensors", *exercises["01_tensors"], "02_backprop", *exercises["02_backprop"], "total"]
    assert points[0] == "(points possible)" and points[-1] == "28"
    students = {row[0]: dict(zip(header, row)) for row in rows}
    assert set(students) == {"ada", "bo", "cy", "'=cmd|' /C calc'!A0"}
    ada = students["ada"]
    assert ada["01_tensors"] == "11" and ada["01_tensors/matmul_flops"] == "0" and ada["total"] == "25"
    assert sum(float(ada[c]) for c in exercises["02_backprop"]) == float(ada["02_backprop"]) == 14
    assert students["cy"]["01_tensors"] == "" and students["cy"]["total"] == ""


def test_without_a_roster_only_the_plain_file_is_written(graded, tmp_path):
    written, notes = write_exports(tmp_path / "lms", grades_of(graded), None, {})
    assert [p.name for p in written] == ["grades-by-student.csv"] and "need a roster" in notes[0]
    assert not (tmp_path / "lms" / "canvas.csv").exists()


@pytest.mark.parametrize("roster, problem", [("name,email\nada,a@x\n", "student_id column"),
                                             ("student_id\nada\nada\n", "listed twice")])
def test_an_unusable_roster_is_refused_with_the_reason(tmp_path, roster, problem):
    (tmp_path / "roster.csv").write_text(roster, encoding="utf-8")
    with pytest.raises(ValueError, match=problem):
        read_roster(tmp_path / "roster.csv")


def test_the_command_and_nbgraders_export_write_the_same_files(graded, tmp_path):
    """`make export` runs the module; `nbgrader export --exporter=...` (from the kit's folder) the plugin."""
    command = subprocess.run([sys.executable, "-m", "autograder.grading.export", str(graded), "--roster",
                              str(tmp_path / "roster.csv"), "--items", str(tmp_path / "items.csv")],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
    assert command.returncode == 0, command.stderr
    assert "=cmd|' /C calc'!A0 was graded but is not on the roster" not in command.stderr  # it is on the roster
    command_files = {path.name: read(path) for path in (graded / "lms").iterdir()}
    for path in (graded / "lms").iterdir():
        path.unlink()
    plugin = subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--CourseDirectory.root={graded}",
                             "--CourseDirectory.course_id=dl-hwsw",
                             "--exporter=autograder.grading.export.LmsExportPlugin",
                             f"--LmsExportPlugin.roster={tmp_path / 'roster.csv'}",
                             f"--LmsExportPlugin.items={tmp_path / 'items.csv'}"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert plugin.returncode == 0, plugin.stderr
    assert sorted(command_files) == ["canvas.csv", "grades-by-student.csv", "moodle.csv"]
    for name in command_files:
        assert read(graded / "lms" / name) == command_files[name], name  # the plugin wrote OUT/lms/ again
    assert command_files["canvas.csv"][0][5] == "Lab 1: tensors (4711)"


def test_the_command_says_what_is_missing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "autograder.grading.export", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no gradebook" in proc.stderr
