"""Check the kit on a machine with a CUDA GPU: python -m autograder.verify.gpu_check [OUT]   (`make gpu-check`)

CI has no GPU, so what only a GPU shows is checked here, by whoever has one:
1. every torch notebook's instructor source runs top to bottom with DLKIT_DEVICES=cpu,cuda (01 alone
   first, so that nothing shares the GPU while it measures its matmul rates; the rest at once). Where
   TensorFlow is not installed (the borrowed GPU machine), 08 runs without its TensorFlow cells, so
   its DDP ranks still run there, and its samples are not graded;
2. meanwhile the sample submissions of those notebooks are graded by the default grader (devices
   "auto", warm kernels, the sandbox where the grader is root), as a TA's `make grade` would, with
   half the machine's cores as workers (a GPU machine is lent for minutes, not hours);
3. the outcomes must hold: each notebook ran without an error, each reference has full marks with
   devices cpu+cuda (cpu alone for 02, whose tests are NumPy's), each sample fails exactly the tests
   autograder/expected lists (the top-level lists, which CPU-only machines meet through the simulated
   accelerator, or a [cuda] table where a sample differs on CUDA), and notebook 01's bf16 matmul
   reaches 70% of the GPU's spec peak;
4. OUT/gpu-check.md records the date, the GPU, torch's version and every result.
Exit status 0 only if everything held; 2 where there is no CUDA GPU to check.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from multiprocessing import get_context
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from autograder.authoring.samples import SUBMISSIONS, expected_failures_on
from autograder.course import assignments
from autograder.grading.csv_cells import read_rows
from autograder.grading.report import failing_tests
from autograder.paths import REPO

#: Notebook 01 on a GPU the kit knows: its bf16 matmul must reach this share of the spec peak.
BF16_SHARE = 0.70


def imports(source: Path, library: str) -> bool:
    """Whether a code cell of the notebook imports `library`."""
    pattern = re.compile(rf"^\s*(import {library}\b|from {library}\b)", re.M)
    return any(pattern.search(c.source) for c in nbformat.read(source, as_version=4).cells if c.cell_type == "code")


def has_tensorflow() -> bool:
    """Whether this machine can import TensorFlow (the GPU machine this project borrows cannot)."""
    return importlib.util.find_spec("tensorflow") is not None


#: Code that uses TensorFlow, as without_tensorflow recognises it.
MENTIONS_TENSORFLOW = re.compile(r"\b(tensorflow|keras|tf)\b")


def mostly_tensorflow(source: Path) -> bool:
    """Whether most of the notebook's graded test cells use TensorFlow (05 and 06; 08's are mostly torch's)."""
    tests = [c.source for c in nbformat.read(source, as_version=4).cells
             if c.cell_type == "code" and c.get("metadata", {}).get("nbgrader", {}).get("grade")]
    return sum(bool(MENTIONS_TENSORFLOW.search(t)) for t in tests) * 2 > len(tests)


def torch_assignments() -> dict[str, Path]:
    """The assignments whose source imports torch, run top to bottom. Where TensorFlow is not installed,
    those mostly about TensorFlow are left out and the rest run without their TensorFlow cells
    (without_tensorflow); only where every cell can run are their samples graded (gradable)."""
    return {name: path for name, path in assignments().items() if imports(path, "torch")
            and (has_tensorflow() or not (imports(path, "tensorflow") and mostly_tensorflow(path)))}


def gradable(names: list[str]) -> list[str]:
    """Those of `names` whose samples this machine can grade: every cell needs to run, TensorFlow's included."""
    return [n for n in names if has_tensorflow() or not imports(assignments()[n], "tensorflow")]


def uses_devices(name: str) -> bool:
    """Whether assignment `name`'s tests run on each device (dlkit.check_on_devices), so its reference's
    devices must include cuda; NumPy-only tests (02) run once, on the CPU."""
    return "check_on_devices" in assignments()[name].read_text(encoding="utf-8")


#: First cell of a run without TensorFlow: modules that give the setup cell what it asks of TensorFlow
#: (its logical-device lines, its logger, its version, dlkit.seed_everything's seed) and nothing else;
#: TENSORFLOW_GONE takes them out again after the setup cell, so that libraries which look for TensorFlow
#: in sys.modules (matplotlib, dlkit) do not find them later. A spec without an origin: torch._dynamo asks
#: every name on its skip list for one.
TENSORFLOW_STAND_IN = """\
import importlib.machinery, logging, sys, types
_config = types.SimpleNamespace(
    list_physical_devices=lambda kind=None: ["CPU"], list_logical_devices=lambda kind=None: [],
    set_logical_device_configuration=lambda device, logical: None, LogicalDeviceConfiguration=lambda **kw: None)
for _name in ("tensorflow", "keras"):
    _module = types.ModuleType(_name, "TensorFlow is not installed on this machine")
    _module.__spec__ = importlib.machinery.ModuleSpec(_name, None)
    _module.__version__ = "not installed"
    _module.config = _config
    _module.get_logger = lambda: logging.getLogger("tensorflow")
    _module.random = types.SimpleNamespace(set_seed=lambda seed: None)
    sys.modules[_name] = _module
"""
TENSORFLOW_GONE = "import sys\nfor _name in ('tensorflow', 'keras'):\n    del sys.modules[_name]\n"


def without_tensorflow(nb: nbformat.NotebookNode) -> int:
    """Make `nb` runnable where TensorFlow is not installed, in place: its TensorFlow cells out (every code
    cell but the setup cell that mentions it), stand-ins around the setup cell for its TensorFlow lines. Returns how
    many cells went. Only for this check, whose machine has torch and CUDA but no TensorFlow: 08's DDP
    ranks still run there."""
    cells, dropped = [], 0
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup":
            cells += [nbformat.v4.new_code_cell(TENSORFLOW_STAND_IN), cell, nbformat.v4.new_code_cell(TENSORFLOW_GONE)]
        elif cell.cell_type == "code" and MENTIONS_TENSORFLOW.search(cell.source):
            dropped += 1
        else:
            cells.append(cell)
    nb.cells = cells
    return dropped


def run_notebook(source: Path, workdir: Path) -> tuple[str, bool, float, nbformat.NotebookNode]:
    """Execute `source` top to bottom with DLKIT_DEVICES=cpu,cuda: (what happened, whether it ran, seconds,
    executed notebook). Where it needs TensorFlow and this machine has none, its torch parts only."""
    nb = nbformat.read(source, as_version=4)
    ran = "ran"
    if imports(source, "tensorflow") and not has_tensorflow():
        ran = f"ran without its {without_tensorflow(nb)} TensorFlow cells"
    os.environ["DLKIT_DEVICES"] = "cpu,cuda"
    started = time.perf_counter()
    try:
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}).execute()
        return ran, True, time.perf_counter() - started, nb
    except CellExecutionError as err:
        return str(err).strip().splitlines()[-1], False, time.perf_counter() - started, nb


def bf16_shares(nb: nbformat.NotebookNode) -> list[float]:
    """The bf16 'spec peak = N%' figures notebook 01's precision cell printed, as fractions."""
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    return [float(share) / 100 for share in re.findall(r"bf16:.*spec peak = (\d+)%", text)]


def start_grading(names: list[str], out: Path) -> subprocess.Popen:
    """Start grading every sample of `names` with the default grader into `out`/grades, logging to `out`/grader.log."""
    class_dir = out / "class"
    for notebook in SUBMISSIONS.glob("*/*/*.ipynb"):
        if notebook.parent.name in names:
            target = class_dir / notebook.parent.parent.name / notebook.parent.name
            shutil.copytree(notebook.parent, target, dirs_exist_ok=True)
    workers = max(1, (os.cpu_count() or 2) // 2)
    env = {k: v for k, v in os.environ.items() if k != "DLKIT_DEVICES"}  # the grader's default: devices "auto"
    with open(out / "grader.log", "w", encoding="utf-8") as log:
        return subprocess.Popen([sys.executable, "-m", "autograder.grade", str(class_dir), str(out / "grades"),
                                 "--assignments", ",".join(names), "--cell-timeout", "45", "--workers", str(workers)],
                                cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)


def graded_rows(out: Path, name: str) -> list[dict]:
    """The rows of `out`/grades/`name`, none where the grader did not write it."""
    path = out / "grades" / name
    return read_rows(path) if path.exists() else []


def run_in_workdir(name: str, out: Path) -> tuple[str, str, bool, float, nbformat.NotebookNode]:
    """run_notebook for assignment `name` in a fresh folder `out`/run/`name`, with `name` in front."""
    workdir = out / "run" / name
    workdir.mkdir(parents=True)
    return (name, *run_notebook(assignments()[name], workdir))


def main(argv: list[str]) -> int:
    import torch

    if not torch.cuda.is_available():
        print("gpu-check: this machine has no CUDA GPU that torch can use; nothing to check", file=sys.stderr)
        return 2
    out = Path(argv[0] if argv else "build/gpu-check").resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    gpu = torch.cuda.get_device_name()
    lines = [f"# GPU check, {date.today().isoformat()}", "",
             f"GPU: {gpu}; torch {torch.__version__}; CUDA {torch.version.cuda}", ""]
    problems: list[str] = []
    names = list(torch_assignments())
    graded = gradable(names)
    lines += [f"Run top to bottom: {', '.join(names)}; samples graded: {', '.join(graded)}. "
              "Not checked (no torch, or mostly TensorFlow where it is not installed): "
              f"{', '.join(sorted(set(assignments()) - set(names))) or 'none'}. TensorFlow: "
              f"{'installed' if has_tensorflow() else 'not installed, so its cells were left out of the runs'}.", ""]

    lines += ["## Notebooks top to bottom, DLKIT_DEVICES=cpu,cuda", "",
              "| notebook | seconds | result |", "|---|---|---|"]
    first = [n for n in names if n == "01_tensors"]
    runs = [run_in_workdir(n, out) for n in first]  # alone: its matmul rates are the GPU's own
    grading = start_grading(graded, out)
    rest = [n for n in names if n not in first]
    with ProcessPoolExecutor(max_workers=max(1, len(rest)), mp_context=get_context("spawn")) as pool:
        runs += list(pool.map(run_in_workdir, rest, [out] * len(rest)))
    for name, what, ran, seconds, nb in runs:
        lines.append(f"| {name} | {seconds:.0f} | {what} |")
        if not ran:
            problems.append(f"{name} did not run top to bottom: {what}")
        if name == "01_tensors":
            shares = bf16_shares(nb)
            lines += ["", f"01's bf16 matmul: {', '.join(f'{s:.0%}' for s in shares) or 'no figure'} "
                          "of the spec peak", ""]
            if not shares or max(shares) < BF16_SHARE:
                problems.append(f"01's bf16 matmul reached {max(shares, default=0):.0%} of the spec peak, "
                                f"below {BF16_SHARE:.0%}")

    status = grading.wait()
    results, grades = graded_rows(out, "results.csv"), graded_rows(out, "grades.csv")
    if status != 0:
        problems.append(f"the grader exited with status {status} (grader.log)")
    expected = {(s, a): set(tests) for a, per in expected_failures_on("cuda").items() if a in graded
                for s, tests in per.items()}
    got = failing_tests(results)
    lines += ["", "## Samples graded by the default grader", "",
              "| student | assignment | devices | expected | result |", "|---|---|---|---|---|"]
    for g in grades:
        key = (g["student_id"], g["assignment"])
        want, failed = expected.get(key), got.get(key, set())
        on_cuda = "cuda" in g["devices"].split("+") or not (key[0] == "reference" and uses_devices(key[1]))
        ok = want is not None and failed == want and on_cuda
        lines.append(f"| {key[0]} | {key[1]} | {g['devices']} | {sorted(want) if want is not None else '?'} | "
                     f"{'as expected' if ok else sorted(failed)} |")
        if not ok:
            problems.append(f"{key[0]}/{key[1]}: failed {sorted(failed)} on devices {g['devices']}, expected "
                            f"{sorted(want) if want is not None else 'an entry in autograder/expected'}")
    lines += ["", "## Verdict", ""] + ([f"- {p}" for p in problems] or ["everything held"])
    (out / "gpu-check.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
