"""Rehearse a release notebook as Colab runs it: python -m autograder.verify.colab_rehearsal [--notebook NAME]
[--python PYTHON] [--out DIR]   (`make colab-rehearsal`; needs network for pip and a few minutes; not in `make test`).

Colab cannot be reached from CI, yet what students meet there is a runtime with torch, NumPy,
matplotlib and tqdm preinstalled and nothing of the kit: the release's setup cell
(colab_setup.py) must install what the notebook imports beyond that (07: onnx, onnxruntime,
onnxscript) and dlkit, and then every visible test must pass with the reference answers. The
kit's own tests run in the course venv, where all of that is installed already, so they cannot
show it. This rehearsal does, as closely as a machine without Colab can:

1. a fresh venv (build/colab-rehearsal/venv) gets only what Colab preinstalls among what the
   notebook imports, at the course pins (torch, TensorFlow, NumPy, matplotlib, tqdm) plus ipykernel;
   the libraries the setup cell is there to install, and dlkit, are checked absent before the run;
2. dlkit is built as a wheel from what `make publish` puts in the student repository, since the
   repository the setup cell names (`[tool.dlkit.publish]`) is not published for a checkout; the
   setup cell's `requirement` is pointed at that wheel, and nothing else in the cell changes;
3. the released notebook, filled with the instructor's solutions (samples.reference_submission),
   runs top to bottom with nbclient in a kernel of that venv, the machine's network and pip
   configuration included;
4. it passes when the setup cell said it installed the missing pins and dlkit, the venv then has
   them at the pinned versions, no cell raised and every visible test cell ran. The report goes
   to the terminal and to build/colab-rehearsal/report.md.

What it cannot show: Colab's own Python and library versions, its GPU/TPU runtimes, and pip
reaching the published student repository.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbgrader.utils import is_grade

from autograder.authoring import publish, release, samples
from autograder.authoring.colab_setup import DISTRIBUTION, RUNTIME_OWNED, SETUP_GRADE_ID, course_pins
from autograder.course import grade_id_of, notebook_imports
from autograder.paths import BUILD

REHEARSAL = BUILD / "colab-rehearsal"
KERNEL_NAME = "colab-rehearsal"
#: Modules a Colab runtime has before any cell runs, among those the notebooks import (Colab has many more):
#: those the setup cell never installs, and tqdm, which it would install only where a runtime lacks it.
PREINSTALLED = (*sorted(RUNTIME_OWNED), "tqdm")
#: In every rehearsal venv: dlkit's own dependencies and the kernel.
ALWAYS = ("numpy", "matplotlib", "ipykernel")
#: A cell may install for minutes (onnxruntime is large); a notebook that hangs must still end.
CELL_TIMEOUT = 1200
#: Variables of this process that would show the kit to the rehearsal's kernel or pip.
KIT_VARIABLES = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "JUPYTER_PATH", "IPYTHONDIR")


class RehearsalError(RuntimeError):
    """The rehearsal cannot start or its runtime is not what it claims to be."""


def setup_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The release's locked setup cell (nbgrader grade_id dlkit_setup)."""
    for cell in nb.cells:
        if grade_id_of(cell) == SETUP_GRADE_ID:
            return cell
    raise RehearsalError(f"the notebook has no setup cell (grade_id {SETUP_GRADE_ID!r}): is it a release notebook?")


def _defaults(source: str) -> dict[str, ast.expr]:
    """The default-value nodes of the setup cell's `_dlkit_setup(wants=..., requirement=..., extras=...)`."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == "_dlkit_setup":
            named = node.args.args[len(node.args.args) - len(node.args.defaults):]
            return {arg.arg: default for arg, default in zip(named, node.args.defaults)}
    raise RehearsalError("the setup cell defines no _dlkit_setup(...)")


def setup_arguments(source: str) -> dict:
    """What the setup cell was released with: {"wants": ..., "requirement": ..., "extras": [(module, pin), ...]}."""
    return {name: ast.literal_eval(node) for name, node in _defaults(source).items()}


def point_requirement_at(source: str, requirement: str) -> str:
    """The setup cell's source with its dlkit `requirement` replaced by `requirement`, every other byte kept."""
    old = ast.get_source_segment(source, _defaults(source)["requirement"])
    if old is None or source.count(old) != 1:
        raise RehearsalError(f"cannot tell where the setup cell's requirement {old!r} is written")
    return source.replace(old, repr(requirement))


def preinstalled(nb: nbformat.NotebookNode) -> list[str]:
    """What the rehearsal venv starts with: the PREINSTALLED modules the notebook imports, plus ALWAYS,
    at the course pins where pyproject.toml has one (Colab's own versions differ; these repeat)."""
    pins = course_pins()
    imported = {name.split(".")[0] for name in notebook_imports(nb)}
    modules = [m for m in PREINSTALLED if m in imported] + [m for m in ALWAYS if m not in imported]
    distributions = dict.fromkeys(DISTRIBUTION.get(m, m) for m in modules)
    return [pins.get(d, d) for d in distributions]


def expected_installs(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(module, pin) of the setup cell's extras that a Colab runtime lacks: what the cell must install."""
    return [(module, pin) for module, pin in setup_arguments(setup_cell(nb).source)["extras"]
            if module not in PREINSTALLED]


def clean_env(venv: Path) -> dict[str, str]:
    """This process's environment with the venv first on PATH and nothing pointing at the kit."""
    env = {k: v for k, v in os.environ.items() if k not in KIT_VARIABLES and not k.startswith("DLKIT_")}
    env["PATH"] = str(venv / "bin") + os.pathsep + env.get("PATH", "")
    return env


def _run(command: list[str], env: dict[str, str], timeout: float = 1800) -> str:
    """Run `command` away from the checkout (a `python -c` would import from its working folder)."""
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout,
                              cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired as err:
        raise RehearsalError(f"{' '.join(command)} did not finish in {timeout:.0f} s") from err
    if done.returncode != 0:
        raise RehearsalError(f"{' '.join(command)} failed:\n{(done.stderr or done.stdout)[-3000:]}")
    return done.stdout


def present(python: Path, modules: list[str]) -> list[str]:
    """Which of `modules` the interpreter `python` can import, outside the kit's environment."""
    probe = ("import importlib.util, json, sys; "
             "print(json.dumps([m for m in sys.argv[1:] if importlib.util.find_spec(m)]))")
    return json.loads(_run([str(python), "-c", probe, *modules], clean_env(python.parent.parent)))


def check_absent(python: Path, modules: list[str]) -> None:
    """Refuse to rehearse in a runtime that already has what the setup cell must install."""
    found = present(python, modules)
    if found:
        raise RehearsalError(f"{python} already has {', '.join(found)}: the setup cell would have nothing to install, "
                             "so the rehearsal would show nothing")


def versions(python: Path, distributions: list[str]) -> dict[str, str]:
    """{distribution: installed version or "absent"} in the interpreter `python`'s environment."""
    probe = ("import importlib.metadata as m, json, sys\n"
             "def v(d):\n    try:\n        return m.version(d)\n"
             "    except m.PackageNotFoundError:\n        return 'absent'\n"
             "print(json.dumps({d: v(d) for d in sys.argv[1:]}))")
    return json.loads(_run([str(python), "-c", probe, *distributions], clean_env(python.parent.parent)))


def make_venv(venv: Path, base_python: str, requirements: list[str]) -> Path:
    """A fresh venv at `venv` with only `requirements` installed; its python."""
    shutil.rmtree(venv, ignore_errors=True)
    _run([base_python, "-m", "venv", str(venv)], clean_env(venv))
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--quiet", "--upgrade", "pip"], clean_env(venv))
    _run([str(python), "-m", "pip", "install", "--quiet", *requirements], clean_env(venv))
    return python


def build_wheel(out: Path) -> Path:
    """dlkit's wheel, built from what `make publish` copies into the student repository."""
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="student-repo-") as checkout:
        publish.export(Path(checkout), publish.load())
        _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), checkout],
             clean_env(Path(sys.executable).parent.parent))
    (wheel,) = out.glob("dlkit-*.whl")
    return wheel


def kernel_manager(python: Path, folder: Path) -> AsyncKernelManager:
    """A manager for an ipykernel of the venv whose interpreter is `python`, from a kernelspec under `folder`."""
    spec = folder / "kernels" / KERNEL_NAME
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab rehearsal", "language": "python"}, indent=1))
    return AsyncKernelManager(kernel_name=KERNEL_NAME,
                              kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(folder / "kernels")]))


def execute(nb: nbformat.NotebookNode, python: Path, folder: Path) -> str | None:
    """Run `nb` top to bottom in the venv's kernel, in folder/content, going on past errors as the report wants
    them all; what stopped the run early (a timeout, a dead kernel) or None."""
    workdir = folder / "content"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    client = NotebookClient(nb, km=kernel_manager(python, folder), timeout=CELL_TIMEOUT, allow_errors=True,
                            resources={"metadata": {"path": str(workdir)}})
    try:
        client.execute(env=clean_env(python.parent.parent))
    except (CellTimeoutError, DeadKernelError) as err:
        return f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
    return None


def text_of(cell: nbformat.NotebookNode) -> str:
    """What a code cell printed (streams and plain-text results)."""
    return "".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in cell.get("outputs", []))


def failure(cell: nbformat.NotebookNode) -> str | None:
    """Why a code cell failed: the error it raised, or, for a test cell, that it never ran; None if it did not."""
    errors = [o for o in cell.outputs if o.output_type == "error"]
    if errors:
        return f"{errors[0].ename}: {errors[0].evalue}"[:300]
    if is_grade(cell) and cell.execution_count is None:
        return "the test cell never ran"
    return None


def failures(nb: nbformat.NotebookNode) -> dict[str, str]:
    """{"cell <index> (<grade_id or cell id>)": why} for each code cell that failed."""
    found = {}
    for index, cell in enumerate(nb.cells):
        why = failure(cell) if cell.cell_type == "code" else None
        if why:
            found[f"cell {index} ({cell.metadata.get('nbgrader', {}).get('grade_id') or cell.get('id', '?')})"] = why
    return found


def setup_problems(printed: str, installs: list[tuple[str, str]], requirement: str,
                   installed: dict[str, str]) -> list[str]:
    """What the setup cell failed to do: say it installs the missing pins and dlkit, and leave them installed."""
    problems = []
    wanted = f"installing {', '.join(pin for _, pin in installs)} ..."
    if installs and wanted not in printed:
        problems.append(f"the setup cell did not print {wanted!r}")
    if f"installing dlkit from {requirement} ..." not in printed:
        problems.append("the setup cell did not say it installs dlkit")
    if "could not install" in printed:
        problems.append("the setup cell could not install something (see its output)")
    for _, pin in installs:
        name, _, version = pin.partition("==")
        if installed.get(name) != version:
            problems.append(f"{pin} wanted, {name} {installed.get(name)} installed")
    if installed.get("dlkit") == "absent":
        problems.append("dlkit is not installed after the setup cell")
    return problems


def rehearse(name: str, folder: Path = REHEARSAL, base_python: str = sys.executable) -> tuple[bool, str]:
    """Rehearse release notebook `name` as Colab would run it; (passed, the report in markdown)."""
    started = time.perf_counter()
    release.build_release([name])
    nb = samples.reference_submission(name)
    installs = expected_installs(nb)
    runtime = preinstalled(nb)
    folder.mkdir(parents=True, exist_ok=True)
    python = make_venv(folder / "venv", base_python, runtime)
    check_absent(python, [module for module, _ in installs] + ["dlkit"])
    wheel = build_wheel(folder / "wheel")
    requirement = f"dlkit @ {wheel.as_uri()}"
    cell = setup_cell(nb)
    released_requirement = setup_arguments(cell.source)["requirement"]
    cell.source = point_requirement_at(cell.source, requirement)
    prepared = time.perf_counter() - started

    ran = time.perf_counter()
    stopped = execute(nb, python, folder)
    ran = time.perf_counter() - ran
    nbformat.write(nb, folder / f"{name}.executed.ipynb")

    printed = text_of(cell)
    distributions = ([pin.partition("==")[0] for pin in runtime] + [pin.partition("==")[0] for _, pin in installs]
                     + ["dlkit"])
    installed = versions(python, distributions)
    problems = (setup_problems(printed, installs, requirement, installed)
                + [f"{where}: {why}" for where, why in failures(nb).items()]
                + ([f"the run stopped early: {stopped}"] if stopped else []))
    tests = [c for c in nb.cells if c.cell_type == "code" and is_grade(c)]
    failed_tests = [c for c in tests if failure(c)]
    lines = [
        f"# Colab rehearsal of {name}, {datetime.now().isoformat(timespec='minutes')}", "",
        f"Verdict: **{'passed' if not problems else 'FAILED'}**. Python {platform.python_version()} "
        f"({platform.machine()}); venv and wheel built in {prepared:.0f} s, notebook ran in {ran:.0f} s.", "",
        f"- preinstalled (standing in for Colab's own): {', '.join(runtime)}",
        f"- setup cell's dlkit requirement: `{released_requirement}` in the release, pointed at `{requirement}` here",
        f"- the setup cell was to install: {', '.join(pin for _, pin in installs) or 'nothing'}, and dlkit",
        f"- installed afterwards: {', '.join(f'{d} {v}' for d, v in installed.items())}",
        f"- visible test cells: {len(tests)}, failed or did not run: {len(failed_tests)}",
        "", "## What the setup cell printed", "", "```", printed.strip(), "```", "",
        "## Problems", ""] + ([f"- {p}" for p in problems] or ["none"])
    return not problems, "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.verify.colab_rehearsal",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--notebook", default="07_deployment",
                        help="release notebook to rehearse (default 07_deployment)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter the rehearsal venv is made from (Colab's Python is newer than the course's)")
    parser.add_argument("--out", type=Path, default=REHEARSAL, help="folder for the venv, wheel and report")
    args = parser.parse_args(argv)
    try:
        passed, report = rehearse(args.notebook, args.out.resolve(), args.python)
    except (RehearsalError, release.ReleaseError) as err:
        print(f"colab-rehearsal: {err}", file=sys.stderr)
        return 1
    (args.out / "report.md").write_text(report, encoding="utf-8")
    print(report + f"\nwritten to {args.out / 'report.md'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
