"""environment.yml (conda) and pyproject.toml (pip) must pin the same course environment."""

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def pyproject_pins() -> set[str]:
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return set(data["project"]["optional-dependencies"]["course"])


def environment_pins() -> set[str]:
    lines = (REPO / "environment.yml").read_text().splitlines()
    start = lines.index("  - pip:")
    pins = set()
    for line in lines[start + 1:]:
        match = re.match(r"^\s{6}- (\S+)$", line)
        if not match:
            break
        pins.add(match.group(1))
    return pins - {"-e", "."} - {p for p in pins if p.startswith("-e")}


def test_both_files_pin_the_same_packages():
    assert environment_pins() == pyproject_pins()


def test_every_course_dependency_is_pinned_exactly():
    for pin in pyproject_pins():
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", pin), f"{pin} is not an exact pin"
    assert "torch==2.13.0" in pyproject_pins()
