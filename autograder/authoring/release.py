"""Build the student release with nbgrader's own generate_assignment.

Each instructor notebook notebooks/<name>.ipynb becomes assignment <name>: staged as
build/source/<name>/<name>.ipynb, released to build/release/<name>/<name>.ipynb with solutions
replaced by stubs and hidden tests removed. The gradebook nbgrader writes alongside
(build/gradebook.db) records every test cell, hidden tests included, and is the template each
grading workspace starts from.

The release also gets the TA's Colab grading notebook (release/colab_grade.ipynb, see
ta_notebook.py); every release notebook opens with an Open-in-Colab link and a setup cell
(colab_setup.py), both addressed from [tool.dlkit.publish] in pyproject.toml.

The build is incremental: build/release-manifest.json records, per assignment, a fingerprint of
its source notebook, of the code that makes a release and of the publish settings; an assignment
whose fingerprint is unchanged is not released again (`--force` releases all the same).

Usage: python -m autograder.authoring.release [--force] [assignment ...]
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import nbgrader
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.converters import GenerateAssignment
from nbgrader.coursedir import CourseDirectory
from nbgrader.utils import capture_log

from autograder.authoring import publish, ta_notebook
from autograder.course import nbgrader_config, nbgrader_tools_on_path, select
from autograder.paths import AUTOGRADER, BUILD

MANIFEST = "release-manifest.json"
#: The modules whose code shapes a release (its preprocessors, setup cell, TA notebook, configuration).
RELEASE_CODE = tuple(AUTOGRADER / name for name in (
    "authoring/release.py", "nbgrader_config.py", "authoring/colab_setup.py", "grading/preprocessors.py",
    "authoring/publish.py", "authoring/ta_notebook.py", "authoring/colab_grade.ipynb", "course.py"))


class ReleaseError(RuntimeError):
    """generate_assignment refused a source notebook; the message carries nbgrader's log."""


def fingerprint(source: Path) -> str:
    """What one assignment's release is made from: its source, the release code, nbgrader, the publish settings."""
    digest = hashlib.sha256(source.read_bytes())
    for path in RELEASE_CODE:
        digest.update(path.read_bytes())
    digest.update(f"{nbgrader.__version__} {publish.load()!r}".encode())
    return digest.hexdigest()


def _read_manifest(root: Path) -> dict[str, str]:
    """Fingerprints of the assignments the gradebook under `root` holds; empty when there is no gradebook."""
    try:
        return json.loads((root / MANIFEST).read_text()) if (root / "gradebook.db").exists() else {}
    except (OSError, ValueError):
        return {}


def _forget(name: str, root: Path) -> None:
    """Drop an assignment from the release gradebook, so its regenerated cells replace the old ones exactly."""
    if (root / "gradebook.db").exists():
        with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
            try:
                gb.remove_assignment(name)
            except MissingEntry:
                pass


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


def build_release(names: list[str] | None = None, root: Path = BUILD, force: bool = False) -> dict[str, Path]:
    """Release the named assignments (all by default) whose fingerprint changed; return every named release notebook."""
    try:
        sources = select(names)
    except ValueError as err:
        raise ReleaseError(str(err)) from err
    root.mkdir(parents=True, exist_ok=True)
    if not _read_manifest(root):
        (root / "gradebook.db").unlink(missing_ok=True)
    manifest = _read_manifest(root)
    released = {name: root / "release" / name / f"{name}.ipynb" for name in sources}
    with nbgrader_tools_on_path():
        for name in stale(sources, root, force):
            _release_one(name, sources[name], root, manifest)
    ta_notebook.write_release_copy(publish.load(), root / "release")
    return released


def _release_one(name: str, source: Path, root: Path, manifest: dict[str, str]) -> None:
    """Release one stale assignment under `root` and record its fingerprint in `manifest` (and on disk)."""
    manifest.pop(name, None)
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1))  # a failure below leaves it stale, not current
    _forget(name, root)
    stage_source(name, source, root)
    shutil.rmtree(root / "release" / name, ignore_errors=True)
    generate(name, root)
    manifest[name] = fingerprint(source)
    (root / MANIFEST).write_text(json.dumps(manifest, indent=1))


def stale(sources: dict[str, Path], root: Path = BUILD, force: bool = False) -> list[str]:
    """The assignments among `sources` whose release under `root` is missing or out of date."""
    manifest = _read_manifest(root)
    return [name for name, source in sources.items()
            if force or manifest.get(name) != fingerprint(source)
            or not (root / "release" / name / f"{name}.ipynb").exists()]


def main(argv: list[str]) -> int:
    force, names = "--force" in argv, [a for a in argv if a != "--force"] or None
    try:
        rebuilt = stale(select(names), force=force)
        released = build_release(names, force=force)
    except (ReleaseError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    for name, path in released.items():
        print(f"{'released' if name in rebuilt else 'up to date'} {name}: {path.relative_to(BUILD.parent)}")
    if publish.load().is_placeholder:
        print("warning: set `github` in [tool.dlkit.publish] of pyproject.toml: the release's Colab links and "
              "pip installs point at a placeholder repository", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
