"""Where the course is published, read from the one place an instructor sets it, and what goes there.

The release notebooks' Open-in-Colab links and the `pip install` in their setup cell point at the
*student repository*: a public GitHub repository holding the student release and the helper
package, and never the instructor sources (notebooks/ holds solutions and hidden tests). The TA's
Colab grading notebook clones the full kit instead. Both addresses live in `[tool.dlkit.publish]`
of pyproject.toml and nowhere else, so a fork changes one table and rebuilds the release.

Usage: python -m autograder.authoring.publish DEST   copies what students need into DEST, a checkout of the
student repository (`make publish DEST=...`), to commit and push there.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import tomllib

from autograder.paths import RELEASE, REPO

#: The value pyproject.toml ships with; a release built with it gets links that lead nowhere.
PLACEHOLDER = "your-github-org/dl-hwsw-kit"


@dataclass(frozen=True)
class Publish:
    """The student repository (owner/name, branch, release folder) and, if elsewhere, the full kit."""

    github: str = PLACEHOLDER
    branch: str = "main"
    release_dir: str = "release"
    pip_override: str = ""
    kit_override: str = ""

    @property
    def git_url(self) -> str:
        """The student repository, which holds the release and the helper package."""
        return f"https://github.com/{self.github}"

    @property
    def kit_git(self) -> str:
        """The full kit (instructor sources and autograder), which the TA's Colab notebook clones.

        Defaults to the student repository, which is right only where the kit itself is published.
        """
        return self.kit_override or self.git_url

    @property
    def pip(self) -> str:
        """What `pip install` gets the helper package from (the student repository, unless overridden)."""
        return self.pip_override or f"dlkit @ git+{self.git_url}@{self.branch}"

    def colab_url(self, path: str) -> str:
        """Open-in-Colab address of the notebook at `path` inside the published release folder."""
        return (f"https://colab.research.google.com/github/{self.github}/blob/{self.branch}/"
                f"{self.release_dir.strip('/')}/{path}")

    @property
    def is_placeholder(self) -> bool:
        return self.github == PLACEHOLDER


def load(pyproject: Path = REPO / "pyproject.toml") -> Publish:
    """The `[tool.dlkit.publish]` table of pyproject.toml; defaults for any key it leaves out."""
    with open(pyproject, "rb") as f:
        table = tomllib.load(f).get("tool", {}).get("dlkit", {}).get("publish", {})
    unknown = sorted(set(table) - {"github", "branch", "release_dir", "pip", "kit"})
    if unknown:
        raise ValueError(f"unknown keys {unknown} in [tool.dlkit.publish] of {pyproject}")
    if "github" in table and table["github"].count("/") != 1:
        raise ValueError(f"[tool.dlkit.publish] github = {table['github']!r}: expected 'owner/name'")
    defaults = Publish()
    return Publish(github=table.get("github", defaults.github), branch=table.get("branch", defaults.branch),
                   release_dir=table.get("release_dir", defaults.release_dir), pip_override=table.get("pip", ""),
                   kit_override=table.get("kit", ""))


#: What the student repository gets besides the release: enough for `pip install` of dlkit.
PACKAGE_FILES = ("pyproject.toml", "README.md", "docs", "src", "data")


def export(dest: Path, where: Publish, release: Path = RELEASE) -> list[Path]:
    """Copy the built release into dest/<release_dir> and the helper package beside it; return what was written.

    Only the release (solutions stubbed, hidden tests removed) and the package leave the kit, so
    the repository students open never holds an instructor source.
    """
    if not str(dest) or dest.resolve() == REPO or REPO in dest.resolve().parents:
        raise ValueError(f"DEST={str(dest)!r}: give a checkout of the student repository outside the kit")
    if not any(release.glob("*/*.ipynb")):
        raise FileNotFoundError(f"no release in {release}: run `make release` first")
    written = []
    target = dest / where.release_dir
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(release, target)
    written.append(target)
    for name in PACKAGE_FILES:
        source, copy = REPO / name, dest / name
        if source.is_dir():
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            shutil.copy2(source, copy)
        written.append(copy)
    return written


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0]:
        print("usage: python -m autograder.authoring.publish DEST  (a checkout of the student repository)",
              file=sys.stderr)
        return 2
    where = load()
    try:
        written = export(Path(argv[0]), where)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print("wrote", ", ".join(str(p) for p in written))
    print(f"commit and push them to {where.git_url} (branch {where.branch}); students open "
          f"{where.colab_url('<assignment>/<assignment>.ipynb')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
