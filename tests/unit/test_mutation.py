"""Mutation as the measure of hidden tests: autograder/verify/mutants.py makes first-order slips of a reference,
autograder/verify/mutation.py runs an exercise's tests on each. Here on a two-cell notebook: a weak test lets
slips survive, a test over the exercise's domain kills them (`make mutation` does the eight notebooks)."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat

from autograder.paths import REPO
from autograder.verify.mutants import mutants

from .notebooks import answer_cell, graded_cell, notebook

ABSDIFF = "def absdiff(a, b):\n    if a > b:\n        return a - b\n    return b - a\n"


def test_the_operators_make_the_slips_students_make():
    found = {m.description: m.source for m in mutants(ABSDIFF)}
    assert "line 2: Gt -> GtE" in found and "a >= b" in found["line 2: Gt -> GtE"]
    assert "line 3: Sub -> Add" in found and "return a + b" in found["line 3: Sub -> Add"]
    assert "line 2: statement deleted" in found and "line 4: statement deleted" in found, "a branch or return left out"
    assert all(compile(source, "<mutant>", "exec") for source in found.values())
    assert len(found) == len(set(found)), "descriptions name each mutant once"


def tallies(tmp_path, *test_sources: str, absent_device: dict | None = None) -> list[dict]:
    """The absdiff exercise's tally under each test source, in one process (IPython and nbgrader imported once)."""
    paths = []
    for i, test_source in enumerate(test_sources):
        paths.append(str(tmp_path / f"fixture{i}.ipynb"))
        nbformat.write(notebook(answer_cell("absdiff", ABSDIFF), graded_cell("test_absdiff", test_source)), paths[-1])
    script = ("import json; from pathlib import Path; from autograder.verify.mutation import mutate_notebook\n"
              f"for path in {paths!r}:\n"
              f"    t = mutate_notebook(Path(path), {{}}, None, {absent_device!r})['absdiff']\n"
              "    print(json.dumps({'killed': t.killed, 'survivors': t.survivors, 'needs': t.needs_device}))")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return [json.loads(line) for line in proc.stdout.strip().splitlines()[-len(test_sources):]]


def test_a_weak_test_lets_mutants_survive_and_a_test_over_the_domain_kills_them(tmp_path):
    weak, strong = tallies(tmp_path, "assert absdiff(5, 2) == 3",
                           "for a, b in [(5, 2), (2, 5), (3, 3), (-1, 4), (0, 0)]:\n"
                           "    assert absdiff(a, b) == abs(a - b)")
    assert weak["survivors"], "one typical input leaves slips alive"
    assert strong["survivors"] == ["line 2: Gt -> GtE"], "the tie gives the same either way: an equivalent mutant"
    assert strong["killed"] > weak["killed"]


def test_a_survivor_in_code_for_an_absent_device_waits_for_that_device(tmp_path):
    """device-only-mutants.toml: where the device is missing such a survivor is counted apart, not as a gap."""
    [strong] = tallies(tmp_path, "for a, b in [(5, 2), (2, 5), (3, 3), (-1, 4), (0, 0)]:\n"
                                 "    assert absdiff(a, b) == abs(a - b)",
                       absent_device={"absdiff": {"line 2: Gt -> GtE": "cuda"}})
    assert (strong["survivors"], strong["needs"]) == ([], ["line 2: Gt -> GtE (needs cuda)"])


def test_every_device_only_mutant_names_a_device_and_why():
    import tomllib

    from autograder.verify.mutation import DEVICE_ONLY

    entries = [e for exercises in tomllib.loads(DEVICE_ONLY.read_text()).values() for m in exercises.values()
               for e in m.values()]
    assert entries and all(e["device"] in ("cuda", "xla") and len(e["why"]) > 20 for e in entries)
