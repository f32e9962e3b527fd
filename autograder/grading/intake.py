"""Find a class's submissions and vet each one before any kernel starts.

Layout: <submissions>/<student>/<assignment>/*.ipynb. Anything that cannot be graded (a folder
that is not a known assignment, no notebook, a file that is not a valid notebook) becomes a
Submission with a `problem`, so the TA sees it as an error row and the rest of the class is
still graded.

Only what lies inside the class folder is graded. A student folder, assignment folder or notebook
that is a symbolic link is refused, wherever it points, even inside the class: a student's archive
can carry a link to the instructor's solutions, and refusing every link is simpler than judging
where one leads (only a linked student folder's listing is read, for the names of its rows).
A notebook that is not a regular file (a FIFO, a device) is refused without being opened, so it
cannot hang intake. Hard links are not detected: a hard link is a regular file, indistinguishable
from a copy; GNU tar and Python's tarfile (`data` filter) refuse to unpack one to a file outside
the archive (tried: tar 1.34 strips the leading ../ or /).
A link to nothing, like any file beside the folders, is not a submission and is passed over.
A notebook that lost its grading metadata is rebuilt from the release (recover.py) when its answers
can be matched exactly, and refused with the reason when they cannot.

Whatever its bytes, a notebook costs only its own student. Before nbformat sees it, it must be
strict JSON (RFC 8259: no NaN or Infinity, no key twice in one object, so that every reader,
Jupyter's included, reads the same notebook) in UTF-8, of at most MAX_NOTEBOOK_BYTES, MAX_CELLS
cells and MAX_DEPTH levels of nesting, with no unpaired surrogate in its text: far beyond any real
notebook, and each a way a crafted one broke the run or a later step (a list nested 100,000 deep
stopped intake with a RecursionError; a lone surrogate cannot be written back as UTF-8). A problem
nothing here foresaw is still that student's error row, never the class's crash.

Names are data: a folder's name is kept as text, bytes that are not UTF-8 and control characters
written out as `\\xNN` (messages.printable), so it is safe in every CSV, page, figure and path.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import nbformat

from autograder.grading import recover
from autograder.grading.messages import message, printable

# nbgrader uses student ids in paths and database keys.
_STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")
_LINK_ADVICE = "the grader only reads files inside the class folder: put the files themselves there"
_FILE_KINDS = {stat.S_IFIFO: "FIFO (named pipe)", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device",
               stat.S_IFSOCK: "socket", stat.S_IFDIR: "folder"}
#: Bounds on a submitted notebook. The course's notebooks have under 100 cells and nest under 15 levels
#: deep; 100 MiB holds a notebook saved with hundreds of plots.
MAX_NOTEBOOK_BYTES = 100 * 2**20
MAX_CELLS = 10_000
MAX_DEPTH = 100


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one assignment, or the reason it cannot be graded."""

    student: str
    assignment: str
    notebook: Path | None
    problem: str | None = None
    note: str | None = None  # for the TA: how the submission is graded, where that is unusual

    def __post_init__(self) -> None:
        """A problem can quote the file: it is capped and printable like every message (messages.py)."""
        if self.problem is not None:
            object.__setattr__(self, "problem", message(self.problem))


def read_notebook_bytes(path: Path) -> bytes:
    """The bytes of the regular file `path`; OSError for a symbolic link, anything not a regular file, or a
    file over MAX_NOTEBOOK_BYTES.

    The file is checked before it is opened (opening a FIFO or a device can block or act), and
    opened without following links, so a link swapped in after intake is not read either.
    """
    kind = stat.S_IFMT(os.lstat(path).st_mode)
    if kind == stat.S_IFLNK:
        raise OSError(f"it is a symbolic link (to {os.readlink(path)}): {_LINK_ADVICE}")
    if kind != stat.S_IFREG:
        raise OSError(f"it is not a regular file but a {_FILE_KINDS.get(kind, 'special file')}")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError("it is not a regular file")
        data = f.read(MAX_NOTEBOOK_BYTES + 1)
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise OSError(f"it is larger than the {MAX_NOTEBOOK_BYTES // 2**20} MiB a notebook may be: "
                      "clear its outputs and resubmit")
    return data


class NotStrictJSON(ValueError):
    """Text that Python's json module reads but JSON does not allow: NaN, Infinity, a key twice in one object."""


def _refuse_constant(name: str) -> NoReturn:
    raise NotStrictJSON(f"{name} is not a JSON value")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise NotStrictJSON(f"the key {twice!r} appears twice in one object")
    return found


def strict_json(text: str) -> object:
    """`text` parsed as RFC 8259 JSON; NotStrictJSON, json.JSONDecodeError or RecursionError (nesting) if it is not."""
    return json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_unique_keys)


def shape_problem(parsed: object) -> str | None:
    """Why parsed JSON is no notebook to grade (too many cells, nested too deep, text not Unicode), or None."""
    cells = parsed.get("cells") if isinstance(parsed, dict) else None
    if isinstance(cells, list) and len(cells) > MAX_CELLS:
        return f"it has {len(cells)} cells, more than the {MAX_CELLS} a notebook may have"
    stack = [(parsed, 1)]
    while stack:  # not recursive: the depth is what is being checked
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"it nests deeper than {MAX_DEPTH} levels"
        if isinstance(value, dict):
            stack += [(key, depth + 1) for key in value] + [(item, depth + 1) for item in value.values()]
        elif isinstance(value, list):
            stack += [(item, depth + 1) for item in value]
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as err:
                return f"it holds text that is not Unicode (an unpaired surrogate, {err.object[err.start]!r})"
    return None


def load_notebook(path: Path) -> tuple[nbformat.NotebookNode | None, str | None]:
    """The notebook at `path` as nbformat reads and validates it, or None and why it cannot be graded."""
    name = _shown(path.name)
    try:
        text = read_notebook_bytes(path).decode("utf-8")
    except OSError as err:
        return None, f"{name} cannot be read: {err}"
    except UnicodeDecodeError as err:
        return None, f"{name} cannot be read: it is not UTF-8 text ({err})"
    try:
        problem = shape_problem(strict_json(text))
    except json.JSONDecodeError as err:
        return None, (f"{name} is not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}): "
                      "was it saved completely?")
    except NotStrictJSON as err:
        return None, f"{name} is not valid JSON: {err}"
    except RecursionError:
        problem = f"it nests deeper than {MAX_DEPTH} levels"
    if problem is not None:
        return None, f"{name} cannot be graded: {problem}"
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as err:  # nbformat raises several types for a malformed notebook
        return None, f"{name} is not a valid Jupyter notebook: {(str(err).splitlines() or [type(err).__name__])[0]}"
    return nb, None


def metadata_check(nb: nbformat.NotebookNode, release: nbformat.NotebookNode, source: nbformat.NotebookNode
                   ) -> tuple[str | None, str | None]:
    """(problem, note) for a notebook that lost its grading metadata; (None, None) for one that did not.

    `release` and `source` are the assignment's release and instructor notebooks. The note tells
    the TA that the notebook is graded rebuilt (recover.py); the problem says why its answers
    cannot be matched.
    """
    if not recover.needs_rebuild(nb, release):
        return None, None
    try:
        recover.rebuild(nb, release, source)
    except recover.RecoveryError as err:
        return str(err), None
    return None, "it lost its grading metadata (cell ids); its answers were matched by the names they define"


def pick_notebook(folder: Path, assignment: str) -> tuple[Path | None, str | None]:
    """The notebook to grade in a student's assignment folder: <assignment>.ipynb, or the only one."""
    notebooks = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    expected = folder / f"{assignment}.ipynb"
    if expected in notebooks:
        return expected, None
    if len(notebooks) == 1:
        return notebooks[0], None
    if not notebooks:
        return None, f"no .ipynb file in {folder.name}/"
    names = ", ".join(p.name for p in notebooks)
    return None, f"several notebooks ({names}) and none named {assignment}.ipynb: which one is the submission?"


def _shown(name: str) -> str:
    """A folder or file name as the outputs show it, on one line: bytes that are not UTF-8, and control characters
    (newline and tab included), as \\xNN."""
    return printable(os.fsencode(name).decode("utf-8", "backslashreplace"), one_line=True)


def _linked(path: Path, what: str) -> str:
    return f"{what} {_shown(path.name)}/ is a symbolic link (to {_shown(os.readlink(path))}): {_LINK_ADVICE}"


def _folders(parent: Path) -> list[Path]:
    """Sub-folders of `parent`, hidden ones left out; symbolic links to folders included (and refused by the caller)."""
    return sorted(p for p in parent.iterdir() if not p.name.startswith(".") and p.is_dir())


def discover(root: Path, known: set[str], build: Path | None = None) -> list[Submission]:
    """Every <student>/<assignment> folder under `root`, vetted, sorted by student then assignment.

    With `build` (the built release), notebooks that lost their grading metadata are vetted too.
    """
    if not root.is_dir():
        raise FileNotFoundError(f"submissions folder {root} does not exist")
    found = []
    releases: dict[str, tuple] = {}  # assignment -> its (release, source) notebooks, read once
    for student_dir in _folders(root):
        student = _shown(student_dir.name)
        if student_dir.is_symlink():  # its listing names the rows; nothing in it is read
            try:
                names = sorted(_shown(n) for n in os.listdir(student_dir) if not n.startswith(".")) or [""]
            except OSError:
                names = [""]
            found += [Submission(student, name, None, _linked(student_dir, "student folder")) for name in names]
            continue
        for folder in _folders(student_dir):
            assignment = _shown(folder.name)
            if not _STUDENT_ID.match(student):
                found.append(Submission(student, assignment, None,
                                        f"student folder name {student!r} is not a usable student id"))
                continue
            if assignment not in known:
                found.append(Submission(student, assignment, None,
                                        f"{assignment!r} is not an assignment of this course "
                                        f"(known: {', '.join(sorted(known))})"))
                continue
            if folder.is_symlink():
                found.append(Submission(student, assignment, None, _linked(folder, "assignment folder")))
                continue
            try:
                found.append(_vet(student, folder, build, releases))
            except Exception as err:  # noqa: BLE001 - whatever a submission holds costs only its own student
                found.append(Submission(student, assignment, None,
                                        f"the grader could not read it: {type(err).__name__}: {err}"))
    return found


def _vet(student: str, folder: Path, build: Path | None, releases: dict[str, tuple]) -> Submission:
    """The submission in a student's assignment folder (not a link): its notebook, read and checked, or why not."""
    assignment = _shown(folder.name)
    notebook, problem = pick_notebook(folder, assignment)
    if notebook is None:
        return Submission(student, assignment, None, problem)
    nb, problem = load_notebook(notebook)
    if nb is None or build is None:
        return Submission(student, assignment, notebook, problem)
    if assignment not in releases:
        releases[assignment] = tuple(nbformat.read(build / kind / assignment / f"{assignment}.ipynb", as_version=4)
                                     for kind in ("release", "source"))
    problem, note = metadata_check(nb, *releases[assignment])
    return Submission(student, assignment, notebook, problem, note)
