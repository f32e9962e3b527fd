"""Check the kit on a machine with a CUDA GPU: python -m autograder.verify.gpu_check [OUT]   (`make gpu-check`)

CI has no GPU, so what only a GPU shows is checked here, by whoever has one:
1. every torch notebook's instructor source runs top to bottom with DLKIT_DEVICES=cpu,cuda;
2. the sample submissions of those notebooks are graded by the default grader (devices "auto",
   warm kernels, the sandbox where the grader is root), as a TA's `make grade` would;
3. the outcomes must hold: each notebook ran without an error, each reference has full marks with
   devices cpu+cuda, each sample fails exactly the tests autograder/expected lists (the top-level
   lists, which CPU-only machines meet through the simulated accelerator, or a [cuda] table where a
   sample differs on CUDA), and notebook 01's bf16 matmul reaches 70% of the GPU's spec peak;
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
from datetime import date
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from autograder.authoring.samples import SUBMISSIONS, expected_failures_on
from autograder.course import assignments
from autograder.grading.csv_cells import read_rows
from autograder.paths import REPO

#: Notebook 01 on a GPU the kit knows: its bf16 matmul must reach this share of the spec peak.
BF16_SHARE = 0.70


def imports(source: Path, library: str) -> bool:
    """Whether a code cell of the notebook imports `library`."""
    pattern = re.compile(rf"^\s*(import {library}\b|from {library}\b)", re.M)
    return any(pattern.search(c.source) for c in nbformat.read(source, as_version=4).cells if c.cell_type == "code")


def torch_assignments() -> dict[str, Path]:
    """The assignments whose source imports torch, less those needing TensorFlow where it is not installed."""
    has_tf = importlib.util.find_spec("tensorflow") is not None
    return {name: path for name, path in assignments().items()
            if imports(path, "torch") and (has_tf or not imports(path, "tensorflow"))}


def run_notebook(source: Path, workdir: Path) -> tuple[str | None, float, nbformat.NotebookNode]:
    """Execute `source` top to bottom with DLKIT_DEVICES=cpu,cuda: (first error or None, seconds, executed notebook)."""
    nb = nbformat.read(source, as_version=4)
    os.environ["DLKIT_DEVICES"] = "cpu,cuda"
    started = time.perf_counter()
    try:
        NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}).execute()
        error = None
    except CellExecutionError as err:
        error = str(err).strip().splitlines()[-1]
    return error, time.perf_counter() - started, nb


def bf16_shares(nb: nbformat.NotebookNode) -> list[float]:
    """The bf16 'spec peak = N%' figures notebook 01's precision cell printed, as fractions."""
    text = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    return [float(share) / 100 for share in re.findall(r"bf16:.*spec peak = (\d+)%", text)]


def failing_tests(rows: list[dict]) -> dict[tuple[str, str], set[str]]:
    """{(student, assignment): test cells with a row neither passed nor skipped}."""
    failing: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        tests = failing.setdefault((r["student_id"], r["assignment"]), set())
        if r["status"] not in ("passed", "skipped"):
            tests.add(r["grade_id"])
    return failing


def grade_samples(names: list[str], out: Path) -> tuple[int, list[dict], list[dict]]:
    """Grade every sample of `names` with the default grader into `out`: (exit status, results rows, grades rows)."""
    class_dir = out / "class"
    for notebook in SUBMISSIONS.glob("*/*/*.ipynb"):
        if notebook.parent.name in names:
            target = class_dir / notebook.parent.parent.name / notebook.parent.name
            shutil.copytree(notebook.parent, target, dirs_exist_ok=True)
    grades = out / "grades"
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(grades),
                           "--assignments", ",".join(names), "--cell-timeout", "45"], cwd=REPO)

    def read(name: str) -> list[dict]:
        path = grades / name
        return read_rows(path) if path.exists() else []

    return proc.returncode, read("results.csv"), read("grades.csv")


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
    left_out = sorted(set(assignments()) - set(names))
    lines += [f"Checked: {', '.join(names)}. Not checked (no torch, or TensorFlow not installed): "
              f"{', '.join(left_out) or 'none'}.", ""]

    lines += ["## Notebooks top to bottom, DLKIT_DEVICES=cpu,cuda", "",
              "| notebook | seconds | result |", "|---|---|---|"]
    for name in names:
        workdir = out / "run" / name
        workdir.mkdir(parents=True)
        error, seconds, nb = run_notebook(assignments()[name], workdir)
        lines.append(f"| {name} | {seconds:.0f} | {error or 'ran'} |")
        if error:
            problems.append(f"{name} did not run top to bottom: {error}")
        if name == "01_tensors":
            shares = bf16_shares(nb)
            lines += ["", f"01's bf16 matmul: {', '.join(f'{s:.0%}' for s in shares) or 'no figure'} "
                          "of the spec peak", ""]
            if shares and max(shares) < BF16_SHARE:
                problems.append(f"01's bf16 matmul reached {max(shares):.0%} of the spec peak, below {BF16_SHARE:.0%}")

    status, results, grades = grade_samples(names, out)
    if status != 0:
        problems.append(f"the grader exited with status {status}")
    expected = {(s, a): set(tests) for a, per in expected_failures_on("cuda").items() if a in names
                for s, tests in per.items()}
    got = failing_tests(results)
    lines += ["", "## Samples graded by the default grader", "",
              "| student | assignment | devices | expected | result |", "|---|---|---|---|---|"]
    for g in grades:
        key = (g["student_id"], g["assignment"])
        want, failed = expected.get(key), got.get(key, set())
        ok = want is not None and failed == want and "cuda" in g["devices"].split("+")
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
