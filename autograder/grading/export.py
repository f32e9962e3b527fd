"""The class's grades in the import formats of an LMS: Canvas, Moodle, and a plain CSV per student.

    python -m autograder.grading.export OUT --roster roster.csv [--items items.csv] [--to DIR]   (`make export`)
    nbgrader export --exporter=autograder.grading.export.LmsExportPlugin --to DIR \
        --LmsExportPlugin.roster=roster.csv                  (the same files, from nbgrader; run from the kit)

Grades come from the class gradebook (OUT/gradebook.db, or `--db-url`), not results.csv: a score a
TA changed in nbgrader's formgrader is the one exported, as nbgrader's own `export` does (late
penalties subtracted, never below 0). An exercise is a solution cell; its score is that of the test
cells after it in the instructor's notebook, up to the next solution cell.

The roster is the TA's CSV mapping the kit's student ids (the submission folders' names) to the LMS's:
a `student_id` column, and those of `name`, `canvas_id`, `sis_user_id`, `sis_login_id`, `section`,
`email`, `id_number` the LMS needs. The optional items file maps assignments to the LMS's columns:
`assignment`, `name` (the column's name there), `canvas_id`. Written into DIR (default OUT/lms):

- canvas.csv, Canvas's gradebook import (Instructure Community, "How do I import grades in the
  Gradebook?"; the columns are those of Canvas's own gradebook export, and an import needs Student,
  one of ID, SIS User ID or SIS Login ID to find the student, and Section, which may be empty, as
  PrairieLearn found, PrairieLearn/PrairieLearn#4547): `Student, ID, SIS User ID, SIS Login ID,
  Section`, then one column per assignment, `Name (canvas_id)` when the items file gives the id
  (Canvas then matches it whatever its name; otherwise by name, and an unknown name becomes a new
  assignment), and a second row `Points Possible` with each assignment's points. Roster rows
  without any of the three ids are left out (and named on stderr).
- moodle.csv, Moodle's grade import CSV (MoodleDocs, "Grade import": one column identifies the user,
  chosen as "Map from" on the import page, and each other column is mapped to a grade item): the
  `Email address` column (Map from "Email address", Map to "useremail"), or `ID number` (to
  "useridnumber") for a roster without emails, then one column per assignment.
- grades-by-student.csv, the kit's own: `student_id`, the roster's other columns, then per
  assignment its score and one column per exercise (`<assignment>/<exercise>`), then `total`; the
  second row, `(points possible)`, has the maximum of each.

In canvas.csv and moodle.csv an empty cell is a grade not given (no graded submission): both LMSs
then leave that grade as it is. Every cell is written inert (csv_cells.py): a name an LMS got from a
student (`=HYPERLINK(...)`) stays text in a spreadsheet.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import (
    Assignment,
    Grade,
    Gradebook,
    GradeCell,
    Notebook,
    Student,
    SubmittedAssignment,
    SubmittedNotebook,
)
from nbgrader.plugins import ExportPlugin
from traitlets import Unicode

from autograder.course import assignments, nbgrader_config
from autograder.grading.csv_cells import read_rows, write_rows
from autograder.verify.accuracy import tests_by_exercise

ROSTER_COLUMNS = ("student_id", "name", "canvas_id", "sis_user_id", "sis_login_id", "section", "email", "id_number")
CANVAS_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_IDS = ("canvas_id", "sis_user_id", "sis_login_id")  # what Canvas finds a student by
CANVAS_POINTS_ROW = "Points Possible"
MOODLE_IDENTIFIERS = {"email": "Email address", "id_number": "ID number"}  # roster column -> Moodle's name for it
PLAIN_POINTS_ROW = "(points possible)"
FILES = {"canvas": "canvas.csv", "moodle": "moodle.csv", "plain": "grades-by-student.csv"}


@dataclass
class ClassGrades:
    """What the files hold: each assignment's points and exercises, and each student's scores."""

    points: dict[str, float] = field(default_factory=dict)                      # assignment -> its maximum
    exercise_points: dict[str, dict[str, float]] = field(default_factory=dict)  # assignment -> {exercise: maximum}
    scores: dict[str, dict[str, float]] = field(default_factory=dict)           # student -> {assignment: score}
    exercise_scores: dict[str, dict[tuple[str, str], float]] = field(default_factory=dict)  # (assignment, exercise)


def exercise_of_tests(assignment: str) -> dict[str, str]:
    """{test grade_id: the exercise (solution grade_id) it checks}, from the instructor's notebook; empty if unknown."""
    source = assignments().get(assignment)
    if source is None:
        return {}
    return {test: exercise for exercise, tests in tests_by_exercise(source).items() for test in tests}


def read_gradebook(gb: Gradebook, only_assignments: Iterable[str] = (), only_students: Iterable[str] = ()
                   ) -> ClassGrades:
    """The class's grades from an nbgrader gradebook, in three queries (a class of 1,000 has ~80,000 grades)."""
    grades = ClassGrades()
    wanted = set(only_assignments)
    cells = (gb.db.query(Assignment.name, GradeCell.name, GradeCell.max_score)
             .join(Notebook, Notebook.assignment_id == Assignment.id)
             .join(GradeCell, GradeCell.notebook_id == Notebook.id)
             .order_by(Assignment.name))
    exercise_of: dict[str, dict[str, str]] = {}
    for assignment, test, top in cells:
        if wanted and assignment not in wanted:
            continue
        exercise = exercise_of.setdefault(assignment, exercise_of_tests(assignment)).get(test, test)
        grades.points[assignment] = grades.points.get(assignment, 0.0) + top
        per_exercise = grades.exercise_points.setdefault(assignment, {})
        per_exercise[exercise] = per_exercise.get(exercise, 0.0) + top
    for assignment, per_exercise in grades.exercise_points.items():  # in the notebook's order, as a TA reads it
        order = {exercise: n for n, exercise in enumerate(dict.fromkeys(exercise_of[assignment].values()))}
        grades.exercise_points[assignment] = dict(sorted(per_exercise.items(),
                                                         key=lambda item: (order.get(item[0], len(order)), item[0])))
    submitted = (gb.db.query(Student.id, Assignment.name, GradeCell.name, Grade.score)
                 .select_from(Grade)
                 .join(GradeCell, Grade.cell_id == GradeCell.id)
                 .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
                 .join(SubmittedAssignment, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
                 .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                 .join(Student, SubmittedAssignment.student_id == Student.id))
    students = set(only_students)
    for student, assignment, test, score in submitted:
        if assignment not in grades.points or (students and student not in students):
            continue
        exercise = exercise_of[assignment].get(test, test)
        mine = grades.exercise_scores.setdefault(student, defaultdict(float))
        mine[(assignment, exercise)] += score
        grades.scores.setdefault(student, defaultdict(float))[assignment] += score
    penalties = (gb.db.query(Student.id, Assignment.name, SubmittedAssignment.late_submission_penalty)
                 .select_from(SubmittedAssignment)
                 .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
                 .join(Student, SubmittedAssignment.student_id == Student.id))
    for student, assignment, penalty in penalties:
        if penalty and assignment in grades.scores.get(student, {}):
            grades.scores[student][assignment] = max(0.0, grades.scores[student][assignment] - penalty)
    return grades


def read_roster(path: Path) -> dict[str, dict[str, str]]:
    """{student_id: {column: value}} from the TA's roster CSV; raises ValueError on a roster the files can't use."""
    rows = read_rows(path)
    if not rows or "student_id" not in rows[0]:
        raise ValueError(f"{path}: a roster needs a header row with a student_id column (and any of "
                         f"{', '.join(ROSTER_COLUMNS[1:])})")
    roster: dict[str, dict[str, str]] = {}
    for number, row in enumerate(rows, 2):
        student = row["student_id"].strip()
        if not student:
            raise ValueError(f"{path}, line {number}: no student_id")
        if student in roster:
            raise ValueError(f"{path}, line {number}: student_id {student!r} is listed twice")
        roster[student] = {column: value.strip() for column, value in row.items()}
    return roster


def read_items(path: Path | None) -> dict[str, dict[str, str]]:
    """{assignment: {"name": its column in the LMS, "canvas_id": ...}} from the optional items CSV."""
    if path is None:
        return {}
    return {row["assignment"].strip(): row for row in read_rows(path) if row.get("assignment", "").strip()}


def _number(value: float | None) -> str:
    """A score as the LMSs read it: a decimal point, at most two decimals; empty for no grade."""
    return "" if value is None else f"{round(value, 2):g}"


def _column_name(assignment: str, items: dict[str, dict[str, str]]) -> str:
    return items.get(assignment, {}).get("name") or assignment


def write_canvas(path: Path, grades: ClassGrades, roster: dict[str, dict[str, str]],
                 items: dict[str, dict[str, str]]) -> list[str]:
    """canvas.csv (see the module's docstring); returns the roster's students it had to leave out, and why."""
    header = list(CANVAS_COLUMNS)
    for assignment in grades.points:
        canvas_id = items.get(assignment, {}).get("canvas_id")
        header.append(f"{_column_name(assignment, items)} ({canvas_id})" if canvas_id else
                      _column_name(assignment, items))
    rows = [[CANVAS_POINTS_ROW, "", "", "", "", *(_number(p) for p in grades.points.values())]]
    left_out = []
    for student, info in sorted(roster.items()):
        if not any(info.get(column) for column in CANVAS_IDS):
            left_out.append(f"canvas.csv: {student} has no canvas_id, sis_user_id or sis_login_id in the roster")
            continue
        scores = grades.scores.get(student, {})
        rows.append([info.get("name", ""), *(info.get(column, "") for column in CANVAS_IDS), info.get("section", ""),
                     *(_number(scores.get(a)) for a in grades.points)])
    write_rows(path, header, rows)
    return left_out


def moodle_identifier(roster: dict[str, dict[str, str]]) -> str | None:
    """The roster column moodle.csv identifies students by: email if the roster has one, else id_number, else None."""
    columns = {column for info in roster.values() for column in info}
    return next((column for column in MOODLE_IDENTIFIERS if column in columns), None)


def write_moodle(path: Path, grades: ClassGrades, roster: dict[str, dict[str, str]],
                 items: dict[str, dict[str, str]], identifier: str) -> list[str]:
    """moodle.csv (see the module's docstring), students found by the roster's `identifier` column; returns the
    roster's students it had to leave out, and why."""
    rows, left_out = [], []
    for student, info in sorted(roster.items()):
        if not info.get(identifier):
            left_out.append(f"moodle.csv: {student} has no {identifier} in the roster")
            continue
        scores = grades.scores.get(student, {})
        rows.append([info[identifier], *(_number(scores.get(a)) for a in grades.points)])
    write_rows(path, [MOODLE_IDENTIFIERS[identifier], *(_column_name(a, items) for a in grades.points)], rows)
    return left_out


def write_plain(path: Path, grades: ClassGrades, roster: dict[str, dict[str, str]]) -> None:
    """grades-by-student.csv (see the module's docstring): every student graded or on the roster."""
    extra = [c for c in dict.fromkeys(c for info in roster.values() for c in info) if c != "student_id"]
    header, points = ["student_id", *extra], [PLAIN_POINTS_ROW, *("" for _ in extra)]
    for assignment, top in grades.points.items():
        header.append(assignment)
        points.append(_number(top))
        for exercise, exercise_top in grades.exercise_points[assignment].items():
            header.append(f"{assignment}/{exercise}")
            points.append(_number(exercise_top))
    header.append("total")
    points.append(_number(sum(grades.points.values())))
    rows = [points]
    for student in sorted(set(grades.scores) | set(roster)):
        scores, by_exercise = grades.scores.get(student, {}), grades.exercise_scores.get(student, {})
        row = [student, *(roster.get(student, {}).get(c, "") for c in extra)]
        for assignment in grades.points:
            row.append(_number(scores.get(assignment)))
            row += [_number(by_exercise.get((assignment, e))) for e in grades.exercise_points[assignment]]
        row.append(_number(sum(scores.values())) if scores else "")
        rows.append(row)
    write_rows(path, header, rows)


def write_exports(folder: Path, grades: ClassGrades, roster: dict[str, dict[str, str]] | None,
                  items: dict[str, dict[str, str]]) -> tuple[list[Path], list[str]]:
    """Write the files into `folder` (Canvas and Moodle only with a roster); return them and what was left out."""
    folder.mkdir(parents=True, exist_ok=True)
    write_plain(folder / FILES["plain"], grades, roster or {})
    written = [folder / FILES["plain"]]
    if roster is None:
        return written, ["canvas.csv and moodle.csv need a roster (student_id and the LMS's ids)"]
    notes = [f"{s} was graded but is not on the roster: only in {FILES['plain']}" for s in sorted(grades.scores)
             if s not in roster]
    notes += write_canvas(folder / FILES["canvas"], grades, roster, items)
    written.append(folder / FILES["canvas"])
    identifier = moodle_identifier(roster)
    if identifier is None:
        notes.append(f"moodle.csv not written: the roster has no {' or '.join(MOODLE_IDENTIFIERS)} column")
    else:
        notes += write_moodle(folder / FILES["moodle"], grades, roster, items, identifier)
        written.append(folder / FILES["moodle"])
    return written, notes


class LmsExportPlugin(ExportPlugin):
    """`nbgrader export --exporter=autograder.grading.export.LmsExportPlugin`: the kit's three files into `--to`
    (default: the course directory's lms/)."""

    roster = Unicode("", help="the TA's roster CSV: student_id and the LMS's ids (see autograder/grading/export.py)"
                     ).tag(config=True)
    items = Unicode("", help="optional CSV: assignment, name (the LMS's column), canvas_id").tag(config=True)

    def export(self, gradebook: Gradebook) -> None:
        folder = Path(self.to) if self.to else Path(self.parent.coursedir.root) / "lms"  # as `make export`
        grades = read_gradebook(gradebook, [str(a) for a in self.assignment], [str(s) for s in self.student])
        roster = read_roster(Path(self.roster)) if self.roster else None
        written, notes = write_exports(folder, grades, roster, read_items(Path(self.items) if self.items else None))
        for note in notes:
            self.log.warning(note)
        for path in written:
            self.log.info("wrote %s", path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the graded class (its gradebook.db)")
    parser.add_argument("--roster", type=Path, help="student_id and the LMS's ids, one row per student")
    parser.add_argument("--items", type=Path, help="assignment, name, canvas_id: the LMS's columns")
    parser.add_argument("--to", type=Path, help="folder for the files (default: OUT/lms)")
    parser.add_argument("--db-url", help="the class gradebook, if not OUT/gradebook.db")
    parser.add_argument("--assignments", default="", help="comma-separated assignments (default: all graded)")
    args = parser.parse_args(argv)
    db_url = args.db_url or f"sqlite:///{args.out / 'gradebook.db'}"
    if not args.db_url and not (args.out / "gradebook.db").is_file():
        print(f"error: no gradebook at {args.out / 'gradebook.db'}: grade the class first", file=sys.stderr)
        return 2
    try:
        roster = read_roster(args.roster) if args.roster else None
        items = read_items(args.items)
    except (OSError, ValueError, KeyError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    course_id = nbgrader_config(args.out).CourseDirectory.course_id
    with Gradebook(db_url, course_id=course_id) as gb:
        grades = read_gradebook(gb, [a for a in args.assignments.split(",") if a])
    written, notes = write_exports(args.to or args.out / "lms", grades, roster, items)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    for path in written:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
