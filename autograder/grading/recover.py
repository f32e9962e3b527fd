"""Grade a notebook whose cells lost their nbgrader metadata, by recognising each answer by what it defines.

nbgrader finds a student's answers by `metadata.nbgrader.grade_id`. A notebook pasted cell by
cell into a fresh one, or saved by an editor that drops cell metadata, has none: its answers are
not recognised, the locked cells come back in the wrong places, and every test fails with a
NameError that explains nothing. Such a notebook is rebuilt before nbgrader sees it:

- It needs rebuilding when some code solution cell of the release (by grade_id) is not among the
  student's solution cells. Cells that kept their metadata are still matched by grade_id; only the
  ones that lost it are matched by name. (A student who deleted an answer cell is rebuilt too:
  that answer stays the release's stub, which is what nbgrader would grade.)
- Each solution cell of the instructor source defines names: its functions and classes, or,
  where it defines none, the variables it assigns. A student code cell without a known grade_id
  that defines all of a solution's names (and maybe helpers besides) is that solution's answer.
- The rebuilt notebook is the release's cells in the release's order, the solution cells' sources
  replaced by the student's answers. Only those sources come from the student, as with nbgrader:
  test cells, locked cells, markdown and lecture code come from the release (nbgrader then
  restores hidden tests from the gradebook as usual), every cell's metadata is the release's, and
  the grader's own first cell still goes in ahead of everything (GuardTests).
- Student code cells that answer nothing and are not copies of a release cell (helpers their
  answers call, edited lecture cells) are kept, as plain cells without metadata, right before the
  next answer that follows them in the student's notebook; those after the student's last answer
  go right after it. So a helper defined before or just after the answer that uses it is defined
  before that answer's tests run. An edited lecture cell therefore runs twice: the release's copy
  in place, the student's before their next answer. Student markdown is dropped.
- Refused (RecoveryError, whose message the student sees): two cells define the same answer's
  names; one cell defines the names of two answers; a cell defines some but not all of an
  answer's names; not one answer found. A cell identical to the release's stub does not count
  beside another cell that answers it (a pasted stub with the answer written below it).
Markdown solution cells (written answers, graded by hand) are not recovered; this course has none.
"""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path

import nbformat
from IPython.core.inputtransformer2 import TransformerManager
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell
from nbgrader.utils import is_solution

from autograder.course import grade_id_of

ADVICE = "copy your answers into a fresh copy of the release notebook and resubmit"
_DEF = re.compile(r"^(?:async\s+def|def|class)\s+([A-Za-z_]\w*)", re.MULTILINE)


class RecoveryError(ValueError):
    """The notebook lost its grading metadata and its answers cannot be matched exactly; says why."""


def _is_code_solution(cell: NotebookNode) -> bool:
    return cell.cell_type == "code" and bool(is_solution(cell)) and bool(grade_id_of(cell))


def defined_names(source: str) -> tuple[set[str], set[str]]:
    """(functions and classes, assigned variables) a cell defines at top level.

    IPython syntax (magics, !shell) is translated first; a cell that still does not parse is
    read for `def`/`class` lines, so an answer with a syntax error is placed, and fails, as written.
    """
    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
    except (SyntaxError, ValueError):
        return set(_DEF.findall(source)), set()
    defs, assigned = set(), set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs.add(node.name)
        if isinstance(node, ast.Assign):
            assigned |= set().union(*(_bound(t) for t in node.targets))
        elif isinstance(node, ast.AnnAssign):
            assigned |= _bound(node.target)
    return defs, assigned


def _bound(target: ast.expr) -> set[str]:
    """Names an assignment target binds: `a`, `a, (b, *c)`; not `x.attr` or `x[i]`, which bind nothing new."""
    if isinstance(target, ast.Name):
        return {target.id}
    if isinstance(target, (ast.Tuple, ast.List)):
        return set().union(*(_bound(t) for t in target.elts))
    if isinstance(target, ast.Starred):
        return _bound(target.value)
    return set()


def answer_names(source: NotebookNode) -> dict[str, set[str]]:
    """What identifies each code solution of the instructor source: its functions and classes, else its variables."""
    names = {}
    for cell in source.cells:
        if _is_code_solution(cell):
            defs, assigned = defined_names(cell.source)
            names[grade_id_of(cell)] = defs or assigned
    return names


def needs_rebuild(submitted: NotebookNode, release: NotebookNode) -> bool:
    """Whether some code solution cell of the release is not among the submission's solution cells."""
    have = {grade_id_of(c) for c in submitted.cells if _is_code_solution(c)}
    return any(_is_code_solution(c) and grade_id_of(c) not in have for c in release.cells)


def _refuse(reason: str) -> RecoveryError:
    return RecoveryError(f"this notebook has lost its grading metadata (cell ids) and {reason}: {ADVICE}")


def _listing(names: set[str]) -> str:
    return " and ".join(", ".join(sorted(names)).rsplit(", ", 1))


def _student_answers(submitted: NotebookNode, release: NotebookNode, keys: dict[str, set[str]]
                     ) -> list[tuple[str | None, str]]:
    """The student's code cells that matter, in order: (grade_id answered, source), or (None, source) for extra code."""
    release_ids = {grade_id_of(c) for c in release.cells} - {None}
    solution_ids = {grade_id_of(c) for c in release.cells if _is_code_solution(c)}
    release_sources = {c.source.strip() for c in release.cells if not _is_code_solution(c)}
    cells = []
    for cell in submitted.cells:
        grade_id = grade_id_of(cell)
        if grade_id in solution_ids and _is_code_solution(cell):
            cells.append((grade_id, cell.source))
            continue
        if grade_id in release_ids or cell.cell_type != "code" or cell.source.strip() in release_sources:
            continue  # the release's own copy of this cell is used
        defs, assigned = defined_names(cell.source)
        related = {g for g, names in keys.items() if names & (defs | assigned)}
        if len(related) > 1:
            raise _refuse(f"one cell defines the answers {_listing(set().union(*(keys[g] for g in related)))} together")
        if related:
            (grade_id,) = related
            missing = keys[grade_id] - defs - assigned
            if missing:
                raise _refuse(f"a cell defines {_listing(keys[grade_id] - missing)} but not {_listing(missing)}")
        cells.append((next(iter(related), None), cell.source))
    return cells


def rebuild(submitted: NotebookNode, release: NotebookNode, source: NotebookNode) -> NotebookNode | None:
    """The notebook to grade in place of `submitted`, or None when its grading metadata is intact.

    `release` is the student release, `source` the instructor notebook. Raises RecoveryError
    when the answers cannot be matched exactly (see the module docstring).
    """
    if not needs_rebuild(submitted, release):
        return None
    keys = {g: names for g, names in answer_names(source).items() if names}
    stubs = {grade_id_of(c): c.source.strip() for c in release.cells if _is_code_solution(c)}
    found = _student_answers(submitted, release, keys)
    answers: dict[str, int] = {}  # grade_id -> index in `found` of the student's answer
    for grade_id, stub in stubs.items():
        at = [i for i, (g, _) in enumerate(found) if g == grade_id]
        written = [i for i in at if found[i][1].strip() != stub]
        if len(written) > 1:
            raise _refuse(f"{len(written)} cells answer {_listing(keys.get(grade_id, {grade_id}))}")
        if written or at:
            answers[grade_id] = (written or at)[0]
        elif grade_id not in keys:
            raise _refuse(f"the answer {grade_id!r} defines no function, class or variable to recognise it by")
    if not answers:
        raise _refuse(f"none of its cells defines {_listing(set().union(*keys.values()))}")

    before: dict[str, list[str]] = {}  # grade_id -> extra sources that go right before its answer
    pending: list[str] = []
    last = None
    for i, (grade_id, text) in enumerate(found):
        if grade_id is None:
            pending.append(text)
        elif answers.get(grade_id) == i:
            before[grade_id], pending, last = pending, [], grade_id
    rebuilt = copy.deepcopy(release)
    rebuilt.cells = []
    extras = 0
    for cell in release.cells:
        grade_id = grade_id_of(cell) if _is_code_solution(cell) else None
        for text in before.get(grade_id, []):
            extras += 1
            rebuilt.cells.append(new_code_cell(text, id=f"student-extra-{extras}"))
        cell = copy.deepcopy(cell)
        if grade_id in answers:
            cell.source = found[answers[grade_id]][1]
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        rebuilt.cells.append(cell)
        if grade_id is not None and grade_id == last:
            for text in pending:
                extras += 1
                rebuilt.cells.append(new_code_cell(text, id=f"student-extra-{extras}"))
    return rebuilt


def rebuild_file(text: str, release: Path, source: Path) -> NotebookNode | None:
    """rebuild() for a submitted notebook's text and the release and source notebook files."""
    return rebuild(nbformat.reads(text, as_version=4), nbformat.read(release, as_version=4),
                   nbformat.read(source, as_version=4))
