"""Do the hidden tests tell right from wrong? python -m autograder.verify.accuracy [OUT]
[--assignments a,b]   (`make accuracy`)

A held-out corpus, autograder/corpus/<assignment>.toml, holds answers written from the student's
view (the release notebook) alone: `[[correct]]` ones that differ from the reference (other
algorithms, idioms, dtypes handled) and `[[wrong]]` ones of the kinds students really hand in. Each
entry names the exercise it answers (the grade_id of its solution cell), says in one line why it is
right or wrong, and gives the source of one or more solution cells:

    [[wrong]]
    exercise = "pairwise_sq_dists"
    why = "forgets the clamp: tiny negative distances for coinciding points"
    [wrong.cells]
    pairwise_sq_dists = '''
    def pairwise_sq_dists(x, y): ...
    '''

Every entry becomes part of a notebook: the reference submission with the entry's cells swapped
in. Entries for different exercises share a notebook (an exercise's tests are the test cells
between its solution cell and the next one), so a corpus of ~20 entries per assignment grades as a
handful of notebooks; `alone = true` gives an entry a notebook of its own (for an answer whose
mistake reaches later exercises). The notebooks are graded by the default grader, as a TA would,
and the verdict is:
- a correct entry: every test of the notebook passes;
- a wrong entry: at least one test of its own exercise fails, and no notebook loses points outside
  the exercises of the entries it holds.
The same run grades the sample submissions and the blank release (sample_class.py): each sample
must fail exactly the tests autograder/expected lists for it, the blank release must score 0.
Then the correct answers are graded once more on the CPU alone (--devices cpu): they must keep full
marks both ways, so the simulated accelerator of the default run takes nothing from correct code.
The tables are printed and written to OUT/accuracy.md; exit status 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
import tomllib
from nbgrader.utils import is_grade, is_solution

from autograder.authoring.samples import fill_release, solution_sources
from autograder.course import assignments, grade_id_of
from autograder.grading.csv_cells import read_rows
from autograder.grading.hints import likely_mistakes
from autograder.grading.report import failing_tests, read_results
from autograder.grading.results import CellResult
from autograder.paths import CORPUS, REPO
from autograder.verify.sample_class import SampleVerdict, copy_samples, judge_samples, sample_table

KINDS = ("correct", "wrong")


@dataclass(frozen=True)
class Entry:
    """One answer of the corpus."""

    assignment: str
    kind: str  # "correct" or "wrong"
    exercise: str
    why: str
    cells: dict[str, str]
    alone: bool = False
    mistake: str | None = None  # the known mistake (autograder/hints/) a wrong answer should be told about


def load_corpus(names: list[str] | None = None) -> list[Entry]:
    """Every entry of autograder/corpus/<assignment>.toml for the named assignments (all by default)."""
    entries = []
    for path in sorted(CORPUS.glob("*.toml")):
        if names and path.stem not in names:
            continue
        with open(path, "rb") as f:
            table = tomllib.load(f)
        for kind in KINDS:
            for raw in table.get(kind, []):
                entries.append(Entry(path.stem, kind, raw["exercise"], raw["why"], dict(raw["cells"]),
                                     bool(raw.get("alone", False)), raw.get("mistake")))
    return entries


def tests_by_exercise(source: Path) -> dict[str, list[str]]:
    """{solution grade_id: the test cells after it, up to the next solution cell}, in notebook order."""
    found: dict[str, list[str]] = {}
    current = None
    for cell in nbformat.read(source, as_version=4).cells:
        if is_solution(cell) and cell.cell_type == "code":
            current = grade_id_of(cell)
            found[current] = []
        elif is_grade(cell) and current is not None:
            found[current].append(grade_id_of(cell))
    return found


def pack(entries: list[Entry]) -> list[list[Entry]]:
    """Group entries into notebooks: no two in one notebook touch the same cell; `alone` ones by themselves."""
    notebooks: list[list[Entry]] = []
    for entry in entries:
        if not entry.alone:
            for group in notebooks:
                if not group[0].alone and not any(set(entry.cells) & set(other.cells) for other in group):
                    group.append(entry)
                    break
            else:
                notebooks.append([entry])
        else:
            notebooks.append([entry])
    return notebooks


def build_class(entries: list[Entry], class_dir: Path) -> dict[tuple[str, str], list[Entry]]:
    """Write one notebook per packed group into class_dir/<student>/<assignment>/; return what each holds."""
    held = {}
    by_assignment: dict[tuple[str, str], list[Entry]] = {}
    for entry in entries:
        by_assignment.setdefault((entry.assignment, entry.kind), []).append(entry)
    for (assignment, kind), group in sorted(by_assignment.items()):
        reference = solution_sources(assignments()[assignment])
        for number, notebook_entries in enumerate(pack(group), 1):
            student = f"{kind}{number:02d}"
            answers = dict(reference)
            for entry in notebook_entries:
                unknown = set(entry.cells) - set(reference)
                if unknown:
                    raise ValueError(f"{assignment} corpus entry for {entry.exercise} names cells that are not "
                                     f"solution cells: {sorted(unknown)}")
                answers.update(entry.cells)
            target = class_dir / student / assignment
            target.mkdir(parents=True)
            nbformat.write(fill_release(assignment, answers), target / f"{assignment}.ipynb")
            held[(student, assignment)] = notebook_entries
    return held


def judge(held: dict[tuple[str, str], list[Entry]], failing: dict[tuple[str, str], set[str]]
          ) -> list[tuple[Entry, bool, str]]:
    """(entry, agrees, what happened) for every entry."""
    verdicts = []
    for (student, assignment), entries in held.items():
        tests = tests_by_exercise(assignments()[assignment])
        failed = failing.get((student, assignment))
        own = {t for e in entries for cell in e.cells for t in tests.get(cell, [])}
        for entry in entries:
            mine = set(tests.get(entry.exercise, []))
            if failed is None:
                verdicts.append((entry, False, "not graded"))
            elif entry.kind == "correct":
                verdicts.append((entry, not failed, "full marks" if not failed else f"failed {sorted(failed)}"))
            else:
                collateral = failed - own
                caught = failed & mine
                agrees = bool(caught) and not collateral
                what = (f"failed {sorted(caught)}" if caught else "kept full marks on its exercise") + (
                    f"; also lost {sorted(collateral)} outside its notebook's exercises" if collateral else "")
                verdicts.append((entry, agrees, what))
    return verdicts


def hint_verdicts(held: dict[tuple[str, str], list[Entry]], rows: list[CellResult]) -> list[tuple[Entry, list[str]]]:
    """(entry, ids of the known mistakes its feedback names for its exercise) for every corpus entry."""
    by_submission: dict[tuple[str, str], list[CellResult]] = {}
    for r in rows:
        by_submission.setdefault((r.student_id, r.assignment), []).append(r)
    verdicts = []
    for key, entries in held.items():
        found = likely_mistakes(by_submission.get(key, []))
        verdicts.extend((e, [m.id for m in found if m.exercise == e.exercise]) for e in entries)
    return verdicts


def hint_table(verdicts: list[tuple[Entry, list[str]]]) -> tuple[str, bool]:
    """The hints' record on the corpus, as Markdown, and whether it holds: no correct answer ever gets a hint."""
    lines = ["| assignment | wrong answers | given a hint | given the right hint | correct answers given a hint |",
             "|---|---|---|---|---|"]
    wrongly = []
    for assignment in sorted({e.assignment for e, _ in verdicts}):
        mine = [(e, ids) for e, ids in verdicts if e.assignment == assignment]
        wrong = [(e, ids) for e, ids in mine if e.kind == "wrong"]
        hinted_correct = [(e, ids) for e, ids in mine if e.kind == "correct" and ids]
        wrongly += hinted_correct
        lines.append(f"| {assignment} | {len(wrong)} | {sum(bool(ids) for _, ids in wrong)} | "
                     f"{sum(e.mistake in ids for e, ids in wrong)} | {len(hinted_correct)} |")
    text = "\n".join(lines) + "\n"
    if wrongly:
        text += "\nCorrect answers given a hint:\n" + "".join(
            f"- {e.assignment} {e.exercise} ({e.why}): {ids}\n" for e, ids in wrongly)
    return text, not wrongly


def disagreements(verdicts: list[tuple[Entry, bool, str]]) -> list[str]:
    """One Markdown line per corpus entry that disagrees with its label."""
    return [f"- {e.assignment} {e.kind} answer to {e.exercise} ({e.why}): {what}" for e, ok, what in verdicts if not ok]


def table(verdicts: list[tuple[Entry, bool, str]]) -> str:
    """The agreement table (per assignment) and every disagreement, as Markdown."""
    lines = ["| assignment | correct accepted | wrong rejected |", "|---|---|---|"]
    for assignment in sorted({e.assignment for e, _, _ in verdicts}):
        cells = []
        for kind in KINDS:
            mine = [ok for e, ok, _ in verdicts if e.assignment == assignment and e.kind == kind]
            cells.append(f"{sum(mine)}/{len(mine)}")
        lines.append(f"| {assignment} | {cells[0]} | {cells[1]} |")
    wrongs = disagreements(verdicts)
    return "\n".join(lines + ["", "Disagreements:" if wrongs else "Every entry agrees with its label.", *wrongs]) + "\n"


def grade(class_dir: Path, grades: Path, assignments_: list[str], workers: int | None, *flags: str) -> int:
    """Grade `class_dir` into `grades` with the default grader (and `flags`): its exit status."""
    command = [sys.executable, "-m", "autograder.grade", str(class_dir), str(grades),
               "--assignments", ",".join(assignments_), "--cell-timeout", "60", *flags]
    if workers:
        command += ["--workers", str(workers)]
    return subprocess.run(command, cwd=REPO).returncode


def device_comparison(held: dict[tuple[str, str], list[Entry]], out: Path, workers: int | None,
                      failing_default: dict[tuple[str, str], set[str]]) -> tuple[str, bool]:
    """Same score on every machine: the corpus's correct answers graded again on the CPU alone, against the
    default run (cpu and the simulated accelerator on a CPU-only machine). Every one must keep full marks on
    both, so the simulation takes nothing from correct code that a machine without it would give."""
    class_dir = out / "class-cpu"
    correct = sorted({key for key, entries in held.items() if entries[0].kind == "correct"})
    if not correct:
        return "No correct answers in this run's corpus.\n", True
    for student, assignment in correct:
        shutil.copytree(out / "class" / student / assignment, class_dir / student / assignment)
    status = grade(class_dir, out / "grades-cpu", sorted({a for _, a in correct}), workers, "--devices", "cpu")
    if status != 0:
        return f"The CPU-only run failed: the grader exited with status {status}.\n", False
    on_cpu = failing_tests(read_rows(out / "grades-cpu" / "results.csv"))
    lines = ["| assignment | correct notebooks | full marks on cpu | full marks on cpu+fakegpu | same tests failed |",
             "|---|---|---|---|---|"]
    holds = True
    for assignment in sorted({a for _, a in correct}):
        keys = [k for k in correct if k[1] == assignment]
        cpu_ok = sum(not on_cpu.get(k, {"(not graded)"}) for k in keys)
        default_ok = sum(not failing_default.get(k, {"(not graded)"}) for k in keys)
        same = sum(on_cpu.get(k) == failing_default.get(k) for k in keys)
        holds &= cpu_ok == default_ok == same == len(keys)
        lines.append(f"| {assignment} | {len(keys)} | {cpu_ok} | {default_ok} | {same} |")
    return "\n".join(lines) + "\n", holds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, nargs="?", default=REPO / "build" / "accuracy")
    parser.add_argument("--assignments", default="", help="comma-separated assignments (default: every corpus file)")
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    names = [a for a in args.assignments.split(",") if a] or None
    entries = load_corpus(names)
    if not entries:
        print(f"error: no corpus entries under {CORPUS}", file=sys.stderr)
        return 2
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    held = build_class(entries, out / "class")
    graded = sorted({a for _, a in held} | set(names or assignments()))
    samples = copy_samples(out / "class", graded)
    status = grade(out / "class", out / "grades", graded, args.workers, "--with-blank")
    if status != 0:
        print(f"error: the grader exited with status {status}", file=sys.stderr)
        return status
    failing = failing_tests(read_rows(out / "grades" / "results.csv"))
    verdicts = judge(held, failing)
    devices, devices_hold = device_comparison(held, out, args.workers, failing)
    rows = read_results(out / "grades")
    sample_verdicts = judge_samples(rows, samples)
    hints, hints_hold = hint_table(hint_verdicts(held, rows))
    report = (f"## Held-out corpus\n\n{table(verdicts)}\n## Sample submissions\n\n{sample_table(sample_verdicts)}"
              f"\n## Feedback hints on the corpus (autograder/hints/)\n\n{hints}"
              f"\n## Correct answers on cpu alone and on cpu+fakegpu\n\n{devices}")
    report += "\n" + verdict_summary(verdicts, sample_verdicts, hints_hold, devices_hold)
    (out / "accuracy.md").write_text(report, encoding="utf-8")
    print(report)
    agrees = all(ok for _, ok, _ in verdicts) and all(v.agrees for v in sample_verdicts)
    return 0 if agrees and hints_hold and devices_hold else 1


def verdict_summary(verdicts: list[tuple[Entry, bool, str]], sample_verdicts: list[SampleVerdict], hints_hold: bool,
                    devices_hold: bool) -> str:
    """The report's last section: every disagreement again, in one place at the end, so a log that keeps
    only its tail (a CI run's) still says which answer or sample disagreed and how."""
    lines = [line.replace("- ", "- corpus: ", 1) for line in disagreements(verdicts)]
    lines += [f"- sample: {v.student}/{v.assignment}: {v.what}" for v in sample_verdicts if not v.agrees]
    if not hints_hold:
        lines.append("- hints: a correct answer was given a hint (see the hints section)")
    if not devices_hold:
        lines.append("- devices: a correct answer scored differently on cpu alone (see the devices section)")
    return "## Verdict\n\n" + ("\n".join(lines) if lines else "Everything agrees.") + "\n"


if __name__ == "__main__":
    sys.exit(main())
