"""environment.yml (conda) and pyproject.toml (pip) must pin the same course environment."""

import re

import tomllib

from autograder.paths import REPO


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


def xla_pins() -> set[str]:
    lines = (REPO / "requirements-xla.txt").read_text().splitlines()
    return {line.strip() for line in lines if line.strip() and not line.startswith("#")}


def test_the_xla_environment_pins_the_course_packages_but_torch():
    """`make test-xla` grades with requirements-xla.txt: the same pins, except torch (torch_xla pins 2.9.0) and what
    only that environment needs; packages the grader and the torch notebooks do not use may be left out."""
    xla = xla_pins()
    assert {"torch==2.9.0", "torch_xla==2.9.0"} <= xla
    for pin in xla:
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.+]*", pin), f"{pin} is not an exact pin"
    shared = {p for p in xla if p.split("==")[0] in {q.split("==")[0] for q in pyproject_pins()}} - {"torch==2.9.0"}
    assert shared <= pyproject_pins(), f"pinned differently from pyproject.toml: {sorted(shared - pyproject_pins())}"
    assert {"nbgrader==0.9.6", "tensorflow-cpu==2.21.0"} <= shared


def test_the_containerfile_builds_what_make_venv_builds_and_runs_the_grader_unprivileged():
    """The container recipe cannot run here (no container engine); what can be checked: it installs through
    `make venv` (so the same pins), on the Python environment.yml names, as an ordinary user, and its
    documented `docker run` flags are those the grader prints when a container refuses the sandbox."""
    from autograder.isolation.sandbox import CONTAINER_FLAGS

    text = (REPO / "Containerfile").read_text()
    python = re.search(r"^\s+- python=(\S+)$", (REPO / "environment.yml").read_text(), re.M).group(1)
    assert re.search(rf"^FROM python:{re.escape(python)}-", text, re.M), "the Python environment.yml names"
    assert re.search(r"^RUN make venv\b", text, re.M), "installed by `make venv`, as a newcomer's"
    assert re.search(r"^USER (?!root)\w+", text, re.M), "the grader runs as an ordinary user"
    assert "util-linux" in text, "the sandbox's unshare"
    for flag in CONTAINER_FLAGS:
        assert flag in text, flag
