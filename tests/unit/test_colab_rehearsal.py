"""The Colab rehearsal's parts that need no network (the rehearsal itself: `make colab-rehearsal`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.authoring import colab_setup, publish
from autograder.course import assignments
from autograder.verify import colab_rehearsal


def released_07() -> nbformat.NotebookNode:
    """Notebook 07 with the setup cell the release puts on top, made as the release makes it."""
    nb = nbformat.read(assignments()["07_deployment"], as_version=4)
    nb.cells.insert(0, colab_setup.setup_cell(publish.load().pip, "cpu", colab_setup.extra_requirements(nb)))
    return nb


def test_pointing_the_requirement_at_a_wheel_keeps_the_rest_of_the_setup_cell_byte_identical(tmp_path):
    source = colab_rehearsal.setup_cell(released_07()).source
    wheel = f"dlkit @ {(tmp_path / 'dlkit-0.1.0-py3-none-any.whl').as_uri()}"
    rewritten = colab_rehearsal.point_requirement_at(source, wheel)
    before, after = colab_rehearsal.setup_arguments(source), colab_rehearsal.setup_arguments(rewritten)
    assert after == {**before, "requirement": wheel}
    assert rewritten.replace(repr(wheel), repr(publish.load().pip)) == source


def test_a_notebook_without_the_setup_cell_is_refused():
    nb = nbformat.read(assignments()["07_deployment"], as_version=4)
    with pytest.raises(colab_rehearsal.RehearsalError, match="no setup cell"):
        colab_rehearsal.setup_cell(nb)


def test_07_starts_with_colab_s_torch_and_must_get_the_onnx_libraries_from_its_setup_cell():
    nb = released_07()
    pins = colab_setup.course_pins()
    assert colab_rehearsal.expected_installs(nb) == [(m, pins[m]) for m in ("onnx", "onnxruntime", "onnxscript")]
    runtime = colab_rehearsal.preinstalled(nb)
    assert pins["torch"] in runtime and "ipykernel" in runtime
    assert not [r for r in runtime if r.startswith(("onnx", "dlkit", "tensorflow"))], runtime


def test_the_rehearsal_refuses_a_runtime_that_already_has_onnx_or_dlkit():
    """The course venv has all of them: a rehearsal there would show nothing."""
    with pytest.raises(colab_rehearsal.RehearsalError, match="onnx.*dlkit"):
        colab_rehearsal.check_absent(Path(sys.executable), ["onnx", "onnxscript", "dlkit"])


def test_a_bare_venv_passes_the_check(tmp_path):
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    colab_rehearsal.check_absent(tmp_path / "venv" / "bin" / "python", ["onnx", "onnxruntime", "onnxscript", "dlkit"])


def test_the_setup_cell_s_report_is_checked_against_what_it_had_to_install():
    installs = [("onnx", "onnx==1.23.2"), ("onnxscript", "onnxscript==0.7.2")]
    wheel = "dlkit @ file:///tmp/dlkit-0.1.0-py3-none-any.whl"
    printed = f"installing onnx==1.23.2, onnxscript==0.7.2 ...\ninstalling dlkit from {wheel} ...\nruntime: not Colab"
    installed = {"onnx": "1.23.2", "onnxscript": "0.7.2", "dlkit": "0.1.0"}
    assert colab_rehearsal.setup_problems(printed, installs, wheel, installed) == []
    problems = colab_rehearsal.setup_problems(printed.replace(", onnxscript==0.7.2", ""), installs, wheel,
                                              {**installed, "onnxscript": "absent"})
    assert len(problems) == 2 and "onnxscript==0.7.2 wanted, onnxscript absent installed" in problems
