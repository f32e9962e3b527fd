"""The class report's similar-submissions section for 1,000 students x 40 exercises, timed.

    python -m bench.similarity [--students 1000] [--assignments 5] [--exercises 8] [--repeats 3]

`make bench` (bench/grading.py) runs it after the grading sizes; run alone, it replaces only its own
section of bench/results.md. The class is synthetic, written as a graded class is
(OUT/autograded/<student>/<assignment>/<assignment>.ipynb: a solution cell per exercise, a test cell
with an output after each) beside a release whose solution cells hold the starter code. Each answer
takes a few statements from the exercise's pool, some very popular (the idioms a large part of a
class writes), others shared by a handful of students, and adds three to five of its own, all with
its own variable names; one student in fifty copies another's answer to a few exercises, disguised
(names changed, statements swapped, comments added). Every planted copy must be flagged.

Timed, as the class report calls it: similarity_report.similarity_section(OUT, release), which reads
every notebook, fingerprints every answer, indexes, pairs (in one process per core), and writes
similar-pairs.csv and the section's HTML; median of --repeats, with the CPU time and the load average,
since the machine may be shared. Real graded notebooks carry outputs (plots, hidden test output) that
make each one larger to read than these.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from autograder.grading.csv_cells import read_rows
from autograder.grading.similarity_report import similarity_section
from autograder.paths import REPO

HEADING = "## Similar submissions (class report)"
APIS = ["np.sum", "np.mean", "np.maximum", "np.clip", "np.exp", "np.log", "torch.relu", "torch.matmul", "torch.sigmoid",
        "torch.stack", "torch.cat", "torch.where", "tf.reduce_sum", "tf.matmul", "tf.nn.relu", "len", "range", "zip"]
METHODS = ["sum", "mean", "reshape", "transpose", "detach", "numpy", "item", "to", "max", "argmax", "clamp", "float"]
OPERATORS = ["+", "-", "*", "/", "@", "**", "//"]


@dataclass(frozen=True)
class Measurement:
    students: int
    assignments: int
    exercises: int
    answers: int
    seconds: list[float]      # wall time of each run
    cpu_seconds: list[float]  # CPU time of each run, its worker processes included
    load: list[float]         # the machine's 1-minute load average after each run: how shared it was
    flagged: int
    planted: int
    found: int

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)


def statement(rng: random.Random, names: list[str]) -> str:
    """One plausible line of an answer over the variables `names`."""
    a, b, c = (rng.choice(names) for _ in range(3))
    shape = rng.choice([
        f"{a} = {rng.choice(APIS)}({b}, {rng.choice(['axis', 'dim', 'keepdims'])}={rng.randint(-1, 2)})",
        f"{a} = {b}.{rng.choice(METHODS)}({rng.randint(0, 3)}) {rng.choice(OPERATORS)} {c}",
        f"{a} = {rng.choice(APIS)}({b} {rng.choice(OPERATORS)} {c}.{rng.choice(METHODS)}())",
        f"{a}[{rng.randint(0, 4)}:, {b}] = {c} {rng.choice(OPERATORS)} {rng.randint(1, 9)}.{rng.randint(0, 9)}",
        f"for {a} in range({b}.shape[{rng.randint(0, 2)}]):\n        {c} += {a} {rng.choice(OPERATORS)} {b}",
        f"if {a}.{rng.choice(METHODS)}() > {rng.randint(0, 5)}:\n        {b} = {rng.choice(APIS)}({c})",
    ])
    return f"    {shape}"


def own_statement(rng: random.Random, names: list[str]) -> str:
    """A longer line, the student's own way of doing a step: calls and operators in an order few others pick."""
    a, b, c = (rng.choice(names) for _ in range(3))
    parts = [f"{rng.choice(APIS)}({rng.choice([b, c])}.{rng.choice(METHODS)}({rng.randint(0, 3)}))"
             for _ in range(rng.randint(2, 3))]
    return f"    {a} = " + f" {rng.choice(OPERATORS)} ".join(parts)


def exercise_pool(rng: random.Random, size: int = 120) -> list[str]:
    """An exercise's statements over placeholder names v0..v5, each student renaming them."""
    return [statement(rng, [f"v{i}" for i in range(6)]) for _ in range(size)]


def signature(exercise: str) -> str:
    """The first lines of an exercise's solution cell, given in the release."""
    return f'def {exercise}(x, w, n):\n    """What {exercise} computes, and what it returns."""'


def answer(rng: random.Random, exercise: str, pool: list[str], own: int) -> str:
    """One student's answer: a few statements from the pool (rank 0 the most popular), then three to five of their
    own."""
    picks = sorted({min(int(rng.paretovariate(0.6)) - 1, len(pool) - 1) for _ in range(4)})
    names = rng.sample(["x", "y", "out", "acc", "tmp", "grad", "w", "h", "total", "result", "step", "batch",
                        "weights", "scores", "probs", "i", "j", "k"], 6)
    lines = [f"    {', '.join(names)} = setup(x, w, n)"]  # every name bound, as in a real answer
    lines += [re.sub(r"\bv(\d)\b", lambda m: names[int(m.group(1))], pool[i]) for i in picks]
    lines += [own_statement(random.Random(own * 7919 + n), names) for n in range(rng.randint(3, 5))]
    return f"{signature(exercise)}\n" + "\n".join(lines) + "\n    return x\n"


def disguise(source: str, rng: random.Random) -> str:
    """A copy: the lines' names changed, two body lines swapped, comments added."""
    lines = source.splitlines()
    body = [i for i, line in enumerate(lines) if line.startswith("    ") and not line.startswith("     ")
            and '"""' not in line and "return" not in line and not line.rstrip().endswith(":")]
    if len(body) >= 2:
        i, j = rng.sample(body, 2)
        lines[i], lines[j] = lines[j], lines[i]
    renamed = [re.sub(r"\b(acc|tmp|out|total|result)\b", lambda m: m.group(1) + "_value", line) for line in lines]
    return "\n".join(line + ("  # my step" if n % 3 == 1 else "") for n, line in enumerate(renamed)) + "\n"


def cell(grade_id: str, source: str, solution: bool) -> dict:
    meta = {"grade": not solution, "solution": solution, "locked": not solution, "grade_id": grade_id,
            "schema_version": 3, **({} if solution else {"points": 1})}
    outputs = [] if solution else [{"output_type": "stream", "name": "stdout", "text": "[dlkit-device] {}\n"}]
    return {"cell_type": "code", "execution_count": None, "id": grade_id, "metadata": {"nbgrader": meta},
            "outputs": outputs, "source": source}


def write_notebook(path: Path, answers: dict[str, str]) -> None:
    cells = [c for name, source in answers.items()
             for c in (cell(name, source, True), cell(f"test_{name}", f"assert {name}", False))]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))


def build_class(root: Path, students: int, assignments: int, exercises: int, seed: int = 1
                ) -> set[tuple[str, str, str]]:
    """Write the synthetic class into root/out and its release into root/release; return the planted copies,
    as (exercise, student, the student copied)."""
    rng = random.Random(seed)
    names = {f"a{a}": [f"a{a}_exercise{e}" for e in range(exercises)] for a in range(assignments)}
    pools = {ex: exercise_pool(rng) for exs in names.values() for ex in exs}
    ids = [f"student{n:04d}" for n in range(students)]
    answers = {(s, ex): answer(rng, ex, pools[ex], n * 1000 + k)
               for n, s in enumerate(ids) for k, ex in enumerate(pools)}
    planted = set()
    for n in range(0, students, 50):
        copier, source = ids[n], ids[(n + 17) % students]
        for ex in rng.sample(sorted(pools), min(3, len(pools))):
            answers[(copier, ex)] = disguise(answers[(source, ex)], rng)
            planted.add((ex, copier, source))
    for assignment, exs in names.items():
        starter = {ex: f"{signature(ex)}\n    # YOUR CODE HERE\n    raise NotImplementedError()\n" for ex in exs}
        write_notebook(root / "release" / assignment / f"{assignment}.ipynb", starter)
        for s in ids:
            write_notebook(root / "out" / "autograded" / s / assignment / f"{assignment}.ipynb",
                           {ex: answers[(s, ex)] for ex in exs})
    return planted


def measure(students: int = 1000, assignments: int = 5, exercises: int = 8, repeats: int = 3) -> Measurement:
    with tempfile.TemporaryDirectory(prefix="bench-similarity-") as tmp:
        root = Path(tmp)
        planted = build_class(root, students, assignments, exercises)
        seconds, cpu, load = [], [], []
        for _ in range(repeats):
            started, used = time.perf_counter(), _cpu_seconds()
            similarity_section(root / "out", root / "release")
            seconds.append(time.perf_counter() - started)
            cpu.append(_cpu_seconds() - used)
            load.append(os.getloadavg()[0])
        flagged = {(r["exercise"], *sorted((r["student_a"], r["student_b"])))
                   for r in read_rows(root / "out" / "similar-pairs.csv")}
    found = sum((ex, *sorted((a, b))) in flagged for ex, a, b in planted)
    return Measurement(students, assignments, assignments * exercises, students * assignments * exercises, seconds,
                       cpu, load, len(flagged), len(planted), found)


def _cpu_seconds() -> float:
    """CPU time of this process and of its children that have ended (the comparison's worker processes)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def section(m: Measurement) -> str:
    """The measurement as bench/results.md's section."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    runs = ", ".join(f"{s:.1f}" for s in m.seconds)
    return (f"{HEADING}\n\nMeasured on {when} (`python -m bench.similarity`, or `make bench`): Python "
            f"{platform.python_version()}, "
            f"{os.cpu_count()} cores, as the class report runs it (one process per core). A synthetic class of "
            f"{m.students:,} students x {m.exercises} exercises ({m.answers:,} answers in "
            f"{m.answers // (m.exercises // m.assignments):,} graded notebooks) through the class report's similarity "
            "section: reading the notebooks, fingerprints, inverted index, pairs, similar-pairs.csv and the HTML.\n\n"
            "| answers | median wall time | runs (s) | CPU time (median) | load average | pairs flagged | "
            "planted copies flagged |\n|---|---|---|---|---|---|---|\n"
            f"| {m.answers:,} | **{m.median:.1f} s** | {runs} | {statistics.median(m.cpu_seconds):.1f} s | "
            f"{', '.join(f'{x:.1f}' for x in m.load)} | {m.flagged} | {m.found}/{m.planted} |\n\n"
            "The requirement is under a minute on 2 cores. A load average above the number of cores means other work "
            "shared them: the CPU time is what the comparison itself used. The notebooks carry one short output per "
            "test; real graded notebooks are larger to read.\n")


def update_results(path: Path, text: str) -> None:
    """Put `text` in place of bench/results.md's similarity section (or after the rest), leaving the rest alone."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    before, _, after = old.partition(HEADING)
    rest = after[after.find("\n## "):] if "\n## " in after else ""
    path.write_text(before.rstrip("\n") + ("\n\n" if before.strip() else "") + text + rest, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--students", type=int, default=1000)
    parser.add_argument("--assignments", type=int, default=5)
    parser.add_argument("--exercises", type=int, default=8, help="per assignment (5 x 8: 40)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results.md")
    args = parser.parse_args(argv)
    m = measure(args.students, args.assignments, args.exercises, args.repeats)
    text = section(m)
    update_results(args.out, text)
    print(text)
    return 0 if m.found == m.planted else 1


if __name__ == "__main__":
    sys.exit(main())
