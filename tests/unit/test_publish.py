"""[tool.dlkit.publish]: the one place that says where the kit and its release are published."""

import subprocess
import sys
from pathlib import Path

import pytest

from autograder.authoring import publish, ta_notebook
from autograder.paths import REPO


def write(tmp_path, table: str):
    path = tmp_path / "pyproject.toml"
    path.write_text(f"[project]\nname = 'x'\n\n[tool.dlkit.publish]\n{table}\n")
    return path


def test_addresses_follow_the_table(tmp_path):
    where = publish.load(write(tmp_path, 'github = "uni-ml/dlhw"\nbranch = "ws2026"\nrelease_dir = "student/"'))
    assert where.colab_url("01_tensors/01_tensors.ipynb") == (
        "https://colab.research.google.com/github/uni-ml/dlhw/blob/ws2026/student/01_tensors/01_tensors.ipynb")
    assert where.pip == "dlkit @ git+https://github.com/uni-ml/dlhw@ws2026"
    assert not where.is_placeholder


def test_defaults_and_pip_override(tmp_path):
    where = publish.load(write(tmp_path, 'pip = "dlkit @ https://example.org/dlkit-0.1.0-py3-none-any.whl"'))
    assert where.is_placeholder and where.branch == "main" and where.release_dir == "release"
    assert where.pip.endswith(".whl")


def test_the_shipped_pyproject_has_the_table():
    where = publish.load()
    assert where.github.count("/") == 1 and where.branch


@pytest.mark.parametrize("table,message", [('github = "just-a-name"', "owner/name"),
                                           ('repo = "a/b"', "unknown keys")])
def test_mistakes_are_named(tmp_path, table, message):
    with pytest.raises(ValueError, match=message):
        publish.load(write(tmp_path, table))


def test_ta_notebook_copy_gets_the_repository_and_nothing_else_changes(tmp_path):
    where = publish.load(write(tmp_path, 'github = "uni-ml/dlhw"\nbranch = "ws2026"'))
    source = ta_notebook.parameters_cell(ta_notebook.render(publish.Publish())).source
    params = ta_notebook.parameters_cell(ta_notebook.render(where)).source
    assert 'KIT_REPO = "https://github.com/uni-ml/dlhw"' in params and 'KIT_BRANCH = "ws2026"' in params
    changed = {a for a, b in zip(source.splitlines(), params.splitlines()) if a != b}
    assert {line.split(" = ")[0] for line in changed} == {"KIT_REPO", "KIT_BRANCH"}


def test_kit_override_is_what_the_ta_notebook_clones(tmp_path):
    where = publish.load(write(tmp_path, 'github = "uni-ml/dlhw-student"\nkit = "https://git.example.org/dlhw.git"'))
    params = ta_notebook.parameters_cell(ta_notebook.render(where)).source
    assert 'KIT_REPO = "https://git.example.org/dlhw.git"' in params
    assert where.pip == "dlkit @ git+https://github.com/uni-ml/dlhw-student@main"


def test_the_student_repository_gets_the_release_and_the_package_but_no_source(release, tmp_path):
    where = publish.load(write(tmp_path, 'github = "uni-ml/dlhw-student"\nrelease_dir = "assignments"'))
    dest = tmp_path / "student-repo"
    publish.export(dest, where)
    assert (dest / "assignments" / "01_tensors" / "01_tensors.ipynb").exists()
    assert (dest / "assignments" / ta_notebook.NAME).exists() and (dest / "src" / "dlkit" / "__init__.py").exists()
    assert not (dest / "notebooks").exists() and not (dest / "autograder").exists()
    leaks = [p for p in dest.rglob("*.ipynb")
             if b"BEGIN HIDDEN TESTS" in p.read_bytes() or b"BEGIN SOLUTION" in p.read_bytes()]
    assert not leaks, leaks
    wheel = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "wheel"), str(dest)], capture_output=True, text=True, timeout=300)
    assert wheel.returncode == 0, wheel.stderr
    assert list((tmp_path / "wheel").glob("dlkit-*.whl")), "pip installs dlkit from the student repository"


@pytest.mark.parametrize("dest", ["", ".", "src", "build/student"])
def test_publish_refuses_to_write_into_the_kit(dest):
    with pytest.raises(ValueError, match="outside the kit"):
        publish.export(REPO / dest if dest else Path(""), publish.load())
