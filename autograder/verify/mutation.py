"""`make mutation [NOTEBOOK=..]`: how many first-order mutants of each exercise's reference the hidden tests kill.

For each notebook, in one IPython shell in a process of its own: the notebook's cells run once with the
reference solutions; then for each solution cell, each mutant (mutants.py) replaces it, the cells
between it and its exercise's last test run again (a demo below may feed a test), and the exercise's
test cells run on a seed drawn as the grader draws one. A mutant is killed when a test fails, the
mutant raises, or it runs past MUTANT_SECONDS (the grader's timeout would stop it). Then the reference
cell and the cells below it run again, so the next mutant starts from the reference's state.

Survivors listed in autograder/verify/equivalent-mutants.toml (exercise -> mutant description -> why it
computes the same thing) count as reviewed-equivalent. Survivors listed in device-only-mutants.toml live
in code that runs only on a device (CUDA): where grading has no such device they count as "needs
<device>", where it has one they are plain survivors. Any other survivor makes the exit status 1.
Writes build/mutation/<notebook>.md with every survivor. Devices: those default grading visits here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
import tomllib
from nbgrader.utils import is_grade, is_solution

from autograder.course import assignments, grade_id_of
from autograder.options import grading_devices
from autograder.paths import AUTOGRADER, BUILD
from autograder.verify.mutants import mutants

EQUIVALENT = AUTOGRADER / "verify" / "equivalent-mutants.toml"
DEVICE_ONLY = AUTOGRADER / "verify" / "device-only-mutants.toml"
MUTANT_SECONDS = 20
#: A reference cell's limit: importing TensorFlow alone takes 18 s on a busy 2-core machine.
REFERENCE_CELL_SECONDS = 300


@dataclass
class Tally:
    """One exercise's mutants by outcome."""

    killed: int = 0
    equivalent: int = 0
    survivors: list[str] = field(default_factory=list)
    needs_device: list[str] = field(default_factory=list)  # "<description> (needs <device>)"


class _TooLong(Exception):
    """A cell ran past its time limit."""


def _alarm(signum, frame):
    raise _TooLong("ran past its time limit")


def run_cell(shell, source: str, seconds: int = MUTANT_SECONDS) -> bool:
    """Run one cell under a time limit (a mutant's by default), its output and tracebacks discarded; whether it
    succeeded."""
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(seconds)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return shell.run_cell(source, silent=True).success
    except _TooLong:
        return False
    finally:
        signal.alarm(0)


def each_alone(module: str, names: list[str], extra: list[str]) -> int:
    """Run `python -m module NAME *extra` for each notebook in a process of its own; 1 if any exits non-zero.
    One shell per process: a notebook's state (TensorFlow's devices, fixed once it starts; a process group)
    must not reach the next one."""
    codes = [subprocess.run([sys.executable, "-m", module, name, *extra]).returncode for name in names]
    return 1 if any(codes) else 0


def reference_shell(source: Path):
    """(the notebook's code cells, an IPython shell in this process that ran every cell but the tests) for the
    instructor source `source`: the reference's state, ready for test cells to run in."""
    from IPython.core.interactiveshell import InteractiveShell

    cells = [c for c in nbformat.read(source, as_version=4).cells if c.cell_type == "code"]
    shell = InteractiveShell.instance()
    shell.showtraceback = lambda *args, **kwargs: None  # a failing cell is an outcome, not news
    for cell in cells:
        if not is_grade(cell) or is_solution(cell):
            if not run_cell(shell, cell.source, REFERENCE_CELL_SECONDS):
                raise RuntimeError(f"{source.stem}: the reference notebook fails at cell {cell.get('id')}")
    return cells, shell


def exercise_tests(cells: list, index: int) -> list[int]:
    """The indices of the test cells of the exercise whose solution cell is cells[index]: those between it and
    the next solution cell."""
    nxt = next((i for i in range(index + 1, len(cells)) if is_solution(cells[i])), len(cells))
    return [i for i in range(index + 1, nxt) if is_grade(cells[i]) and not is_solution(cells[i])]


def mutate_notebook(source: Path, equivalent: dict[str, dict[str, str]], limit: int | None = None,
                    absent_device: dict[str, dict[str, str]] | None = None) -> dict[str, Tally]:
    """{exercise: Tally} for every solution cell of the instructor source `source` that has tests;
    `absent_device`: {exercise: {mutant: device}} for survivors in code that needs a device missing here."""
    from dlkit.seeding import seed_everything, seed_for

    name = source.stem
    cells, shell = reference_shell(source)
    tallies: dict[str, Tally] = {}
    for index, cell in enumerate(cells):
        if not is_solution(cell):
            continue
        exercise = grade_id_of(cell)
        tests = exercise_tests(cells, index)
        if not tests:
            continue
        between = [i for i in range(index + 1, tests[-1]) if not is_grade(cells[i])]
        tally = tallies.setdefault(exercise, Tally())
        for mutant in list(mutants(cell.source))[:limit]:
            killed = not run_cell(shell, mutant.source)
            for i in ([] if killed else between):
                run_cell(shell, cells[i].source)  # a demo's failure is not a test's
            if not killed:
                for i in tests:
                    seed_everything(seed_for("mutant", name, grade_id_of(cells[i])))
                    if not run_cell(shell, cells[i].source):
                        killed = True
                        break
            if killed:
                tally.killed += 1
            elif mutant.description in equivalent.get(exercise, {}):
                tally.equivalent += 1
            elif mutant.description in (absent_device or {}).get(exercise, {}):
                tally.needs_device.append(f"{mutant.description} (needs {absent_device[exercise][mutant.description]})")
            else:
                tally.survivors.append(mutant.description)
            for i in [index, *between]:  # back to the reference's state
                run_cell(shell, cells[i].source)
    return tallies


def report(name: str, tallies: dict[str, Tally], seconds: float) -> str:
    lines = [f"# Mutation: {name}", "", f"{seconds:.0f} s; mutants of each exercise's reference, first order "
             "(autograder/verify/mutants.py).", "",
             "| exercise | mutants | killed | reviewed-equivalent | needs a device absent here | survived |",
             "|---|---|---|---|---|---|"]
    for exercise, t in tallies.items():
        total = t.killed + t.equivalent + len(t.needs_device) + len(t.survivors)
        counts = (total, t.killed, t.equivalent, len(t.needs_device), len(t.survivors))
        lines.append(f"| {exercise} | " + " | ".join(map(str, counts)) + " |")
    survivors = [(e, s) for e, t in tallies.items() for s in t.survivors]
    if survivors:
        lines += ["", "Survivors (review each: a missing test, or an equivalent mutant for equivalent-mutants.toml):"]
        lines += [f"- {exercise}: {description}" for exercise, description in survivors]
    waiting = [(e, s) for e, t in tallies.items() for s in t.needs_device]
    if waiting:
        lines += ["", "Not reachable here (device-only-mutants.toml; run make mutation where the device is):"]
        lines += [f"- {exercise}: {description}" for exercise, description in waiting]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="default: all eight")
    parser.add_argument("--limit", type=int, default=None, help="at most this many mutants per exercise")
    parser.add_argument("--out", type=Path, default=BUILD / "mutation")
    args = parser.parse_args(argv)
    # The devices default grading visits on this machine (the simulated accelerator where there is none).
    os.environ.update({"DLKIT_DEVICES": ",".join(grading_devices("auto")), "MPLBACKEND": "Agg"})
    with open(EQUIVALENT, "rb") as f:
        equivalent = tomllib.load(f)
    with open(DEVICE_ONLY, "rb") as f:
        device_only = tomllib.load(f)
    here = set(grading_devices("auto"))
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.notebooks or sorted(assignments())
    if len(names) > 1:
        return each_alone("autograder.verify.mutation", names,
                          ["--out", str(args.out)] + (["--limit", str(args.limit)] if args.limit is not None else []))
    failed = False
    for name in names:
        started = time.monotonic()
        absent = {exercise: {mutant: e["device"] for mutant, e in entries.items() if e["device"] not in here}
                  for exercise, entries in device_only.get(name, {}).items()}
        tallies = mutate_notebook(assignments()[name], equivalent.get(name, {}), args.limit, absent)
        text = report(name, tallies, time.monotonic() - started)
        (args.out / f"{name}.md").write_text(text)
        print(text)
        failed |= any(t.survivors for t in tallies.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
