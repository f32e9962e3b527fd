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
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

import nbformat

from autograder.grading import recover

# nbgrader uses student ids in paths and database keys.
_STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@-]*$")
_LINK_ADVICE = "the grader only reads files inside the class folder: put the files themselves there"
_FILE_KINDS = {stat.S_IFIFO: "FIFO (named pipe)", stat.S_IFCHR: "character device", stat.S_IFBLK: "block device",
               stat.S_IFSOCK: "socket", stat.S_IFDIR: "folder"}


@dataclass(frozen=True)
class Submission:
    """One student's notebook for one assignment, or the reason it cannot be graded."""

    student: str
    assignment: str
    notebook: Path | None
    problem: str | None = None
    note: str | None = None  # for the TA: how the submission is graded, where that is unusual


def read_notebook_bytes(path: Path) -> bytes:
    """The bytes of the regular file `path`; OSError for a symbolic link or anything not a regular file.

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
        return f.read()


def load_notebook(path: Path) -> tuple[nbformat.NotebookNode | None, str | None]:
    """The notebook at `path` as nbformat reads and validates it, or None and why it cannot be graded."""
    try:
        text = read_notebook_bytes(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return None, f"{path.name} cannot be read: {err}"
    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        return None, f"{path.name} is not valid JSON (line {err.lineno}, column {err.colno}): was it saved completely?"
    try:
        nb = nbformat.reads(text, as_version=4)
        nbformat.validate(nb)
    except Exception as err:  # nbformat raises several types for a malformed notebook
        return None, f"{path.name} is not a valid Jupyter notebook: {str(err).splitlines()[0]}"
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


def _linked(path: Path, what: str) -> str:
    return f"{what} {path.name}/ is a symbolic link (to {os.readlink(path)}): {_LINK_ADVICE}"


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
        student = student_dir.name
        if student_dir.is_symlink():  # its listing names the rows; nothing in it is read
            try:
                names = sorted(n for n in os.listdir(student_dir) if not n.startswith(".")) or [""]
            except OSError:
                names = [""]
            found += [Submission(student, name, None, _linked(student_dir, "student folder")) for name in names]
            continue
        for folder in _folders(student_dir):
            assignment = folder.name
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
            found.append(_vet(student, folder, build, releases))
    return found


def _vet(student: str, folder: Path, build: Path | None, releases: dict[str, tuple]) -> Submission:
    """The submission in a student's assignment folder (not a link): its notebook, read and checked, or why not."""
    assignment = folder.name
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
