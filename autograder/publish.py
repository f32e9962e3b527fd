"""Where the course is published, read from the one place an instructor sets it.

The release notebooks' Open-in-Colab links, the `pip install` in their setup cell and the TA's
Colab grading notebook all point at the GitHub repository that hosts the kit. Its owner/name,
branch and release folder live in `[tool.dlkit.publish]` of pyproject.toml and nowhere else,
so a fork changes one table and rebuilds the release.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from .course import REPO

#: The value pyproject.toml ships with; a release built with it gets links that lead nowhere.
PLACEHOLDER = "your-github-org/dl-hwsw-kit"


@dataclass(frozen=True)
class Publish:
    """The GitHub repository, branch and folder that host the kit and its student release."""

    github: str = PLACEHOLDER
    branch: str = "main"
    release_dir: str = "release"
    pip_override: str = ""

    @property
    def git_url(self) -> str:
        return f"https://github.com/{self.github}"

    @property
    def pip(self) -> str:
        """What `pip install` gets the helper package from (the kit's repository, unless overridden)."""
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
    unknown = sorted(set(table) - {"github", "branch", "release_dir", "pip"})
    if unknown:
        raise ValueError(f"unknown keys {unknown} in [tool.dlkit.publish] of {pyproject}")
    if "github" in table and table["github"].count("/") != 1:
        raise ValueError(f"[tool.dlkit.publish] github = {table['github']!r}: expected 'owner/name'")
    defaults = Publish()
    return Publish(github=table.get("github", defaults.github), branch=table.get("branch", defaults.branch),
                   release_dir=table.get("release_dir", defaults.release_dir), pip_override=table.get("pip", ""))
