"""Build the student release with nbgrader's own generate_assignment.

Each instructor notebook notebooks/<name>.ipynb becomes assignment <name>: staged as
build/source/<name>/<name>.ipynb, released to build/release/<name>/<name>.ipynb with solutions
replaced by stubs and hidden tests removed. The gradebook nbgrader writes alongside
(build/gradebook.db) records every test cell, hidden tests included, and is the template each
grading workspace starts from.

The release also gets the TA's Colab grading notebook (release/colab_grade.ipynb, see
ta_notebook.py); every release notebook opens with an Open-in-Colab link and a setup cell
(colab_setup.py), both addressed from [tool.dlkit.publish] in pyproject.toml.

Usage: python -m autograder.release [assignment ...]
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from nbgrader.converters import GenerateAssignment
from nbgrader.coursedir import CourseDirectory
from nbgrader.utils import capture_log

from . import publish, ta_notebook
from .course import BUILD, assignments, nbgrader_config


class ReleaseError(RuntimeError):
    """generate_assignment refused a source notebook; the message carries nbgrader's log."""


def stage_source(name: str, notebook: Path, root: Path) -> Path:
    """Copy an instructor notebook to root/source/<name>/<name>.ipynb, where nbgrader looks for it."""
    folder = root / "source" / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    return Path(shutil.copy2(notebook, folder / f"{name}.ipynb"))


def generate(name: str, root: Path) -> None:
    """Run nbgrader generate_assignment for one staged assignment; raise ReleaseError on failure."""
    config = nbgrader_config(root)
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = name
    app = GenerateAssignment(coursedir=coursedir, config=config)
    app.force = True
    app.create_assignment = True
    result = capture_log(app)
    if not result["success"]:
        raise ReleaseError(f"nbgrader could not release {name}:\n{result.get('log', '')}{result.get('error', '')}")


def build_release(names: list[str] | None = None, root: Path = BUILD) -> dict[str, Path]:
    """Release the named assignments (all by default) from a fresh gradebook; return their release notebooks."""
    sources = assignments()
    names = names or list(sources)
    unknown = sorted(set(names) - set(sources))
    if unknown:
        raise ReleaseError(f"no instructor notebook for {unknown}; known assignments: {sorted(sources)}")
    root.mkdir(parents=True, exist_ok=True)
    (root / "gradebook.db").unlink(missing_ok=True)
    released = {}
    for name in names:
        stage_source(name, sources[name], root)
        shutil.rmtree(root / "release" / name, ignore_errors=True)
        generate(name, root)
        released[name] = root / "release" / name / f"{name}.ipynb"
    ta_notebook.write_release_copy(publish.load(), root / "release")
    return released


def main(argv: list[str]) -> int:
    try:
        released = build_release(argv or None)
    except ReleaseError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for name, path in released.items():
        print(f"released {name}: {path.relative_to(BUILD.parent)}")
    if publish.load().is_placeholder:
        print("warning: set `github` in [tool.dlkit.publish] of pyproject.toml: the release's Colab links and "
              "pip installs point at a placeholder repository", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
