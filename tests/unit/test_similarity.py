"""Similar submissions: disguised copies are flagged, the kit's corpus of correct answers written differently is not,
starter code and the class's idioms never count, and the report's section is escaped, capped and says it is no grade.

The copies are built here from the instructor's solutions: variables renamed, statements reordered,
comments added, the layout changed (ast.unparse), and all of it at once.
"""

from __future__ import annotations

import ast
import io
import itertools
import json
import os
import subprocess
import sys
import tokenize
from functools import cache
from pathlib import Path

import nbformat
import pytest
from nbgrader.preprocessors import ClearSolutions

from autograder.authoring.samples import solution_sources
from autograder.course import assignments, grade_id_of, nbgrader_config
from autograder.grading import similarity
from autograder.grading.class_report import build_report
from autograder.grading.csv_cells import read_rows
from autograder.grading.feedback import write_feedback
from autograder.grading.fingerprints import bound_names, fingerprints, kgrams, normalised_tokens
from autograder.grading.report import write_csvs
from autograder.grading.results import CellResult
from autograder.grading.similarity import exercise_pairs, similar_pairs, solution_cells, write_pairs
from autograder.grading.similarity_report import MAX_PAIRS_SHOWN, marked_source, render, similarity_section
from autograder.paths import REPO
from autograder.verify.accuracy import load_corpus
from tests.unit.notebooks import answer_cell, graded_cell, notebook

DISGUISES = ("renamed", "reordered", "commented", "reformatted", "all_at_once")


def renamed(source: str) -> str:
    """Every name the answer binds given another name (`self` kept: renaming it is legal but nobody does)."""
    names = bound_names(source) - {"self"}
    tokens = [tok._replace(string=f"my_{tok.string}_2") if tok.type == tokenize.NAME and tok.string in names else tok
              for tok in tokenize.generate_tokens(io.StringIO(source).readline)]
    return tokenize.untokenize(tokens)


def reordered(source: str) -> str:
    """Two adjacent statements of the first body that has two that can swap (no return, no docstring) swapped."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        for i in range(len(body) - 1):
            if not any(isinstance(s, (ast.Return, ast.Expr)) for s in body[i:i + 2]):
                body[i], body[i + 1] = body[i + 1], body[i]
                return ast.unparse(tree)
    return ""  # nothing to reorder: the caller skips such an answer


def commented(source: str) -> str:
    """A comment line before every other line and a trailing comment after each call."""
    lines = []
    for number, line in enumerate(source.splitlines()):
        indent = line[:len(line) - len(line.lstrip())]
        if line.strip() and number % 2:
            lines.append(f"{indent}# step {number}: as explained in the lecture")
        lines.append(line + ("  # mine" if line.rstrip().endswith(")") else ""))
    return "\n".join(lines)


def reformatted(source: str) -> str:
    """Another layout: ast.unparse's (its quotes, parentheses, spacing; docstring kept) with blank lines doubled."""
    return ast.unparse(ast.parse(source)).replace("\n", "\n\n")


def all_at_once(source: str) -> str:
    return renamed(commented(reordered(source) or source))


def disguised(source: str, how: str) -> str:
    return {"renamed": renamed, "reordered": reordered, "commented": commented, "reformatted": reformatted,
            "all_at_once": all_at_once}[how](source)


@cache
def starter_code(assignment: str) -> dict[str, str]:
    """{exercise: its cell in the release}: the instructor source with nbgrader's own ClearSolutions applied, so the
    test needs no `make release`."""
    nb = nbformat.read(assignments()[assignment], as_version=4)
    nb, _ = ClearSolutions(config=nbgrader_config(REPO)).preprocess(nb, {})
    return {grade_id_of(c): c.source for c in nb.cells if c.cell_type == "code" and grade_id_of(c)}


def reference_answers() -> list[tuple[str, str, str]]:
    """(assignment, exercise, the instructor's solution) for every exercise of the course."""
    return [(a, exercise, source) for a, path in assignments().items()
            for exercise, source in solution_sources(path).items()]


def distinctive(assignment: str, exercise: str, source: str) -> int:
    """How many fingerprints an answer has beyond its starter code."""
    starter = {h for statement in kgrams(normalised_tokens(starter_code(assignment)[exercise])) for _, h in statement}
    return len(fingerprints(kgrams(normalised_tokens(source))) - starter)


def flagged(pairs) -> set[frozenset[str]]:
    return {frozenset((p.student_a, p.student_b)) for p in pairs}


# --- normalisation and fingerprints ---------------------------------------------------------------------------

CONV = '''def conv2d_single(x, w, stride):
    """Valid cross-correlation of x with w, with a stride."""
    kh, kw = w.shape
    out_h = (x.shape[0] - kh) // stride + 1
    out_w = (x.shape[1] - kw) // stride + 1
    out = np.zeros((out_h, out_w), dtype=x.dtype)
    for i in range(out_h):
        for j in range(out_w):
            window = x[i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[i, j] = np.sum(window * w)
    return out
'''
CONV_STARTER = '''def conv2d_single(x, w, stride):
    """Valid cross-correlation of x with w, with a stride."""
    # YOUR CODE HERE
    raise NotImplementedError()
'''


def test_normalising_drops_comments_docstrings_layout_and_bound_names_but_keeps_what_the_code_calls():
    text = " ".join(t.text for t in normalised_tokens(
        'import numpy as np\ndef f(a, b):\n    """Doc."""\n    # a comment\n    total = np.einsum("ij,jk->ik", a, b)'
        '  # why\n\n    return (total.sum(axis=0),)\n'))
    assert text == "import numpy as V def V V , V : V = V . einsum S , V , V return V . sum axis = 0"


def test_fingerprints_are_the_same_in_every_process():
    """Python salts str hashes per process; fingerprints must not depend on it, or a rebuilt report would differ."""
    code = ("from autograder.grading.fingerprints import fingerprints, kgrams, normalised_tokens\n"
            f"print(sorted(fingerprints(kgrams(normalised_tokens({CONV!r})))))")
    seen = {subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout for seed in ("1", "2")}
    assert len(seen) == 1 and len(json.loads(seen.pop())) > 10


@pytest.mark.parametrize("broken", ["def f(x:\n    return 'unterminated\n", "x = 1\0\n", "%timeit f()\n!ls\n",
                                    "(" * 500 + ")" * 500, "\tif x:\n  y = 1\n else:\n", "é = 'ü' * 3\n" * 3])
def test_cells_that_are_not_python_are_fingerprinted_without_raising(broken):
    kgrams(normalised_tokens(broken))


# --- what is flagged and what is not ----------------------------------------------------------------------------

@pytest.mark.parametrize("how", DISGUISES)
def test_a_disguised_copy_of_a_conv2d_answer_is_flagged(how):
    copy = disguised(CONV, how)
    assert copy.strip() != CONV.strip()
    pairs = exercise_pairs("01_tensors", "conv2d_single", {"alice": CONV, "bob": copy}, CONV_STARTER)
    assert flagged(pairs) == {frozenset(("alice", "bob"))}, how
    assert pairs[0].score >= similarity.FLAG_SCORE


@pytest.mark.parametrize("how", DISGUISES)
def test_disguised_copies_of_every_long_enough_instructor_solution_are_flagged(how):
    """Every exercise whose answer has enough to go on: the copy is flagged against its original, in a class that
    also holds the corpus's correct answers to the exercise; short answers (a line or two) are never flagged."""
    missed, checked = [], 0
    for assignment, exercise, source in reference_answers():
        copy = disguised(source, how)
        if not copy or distinctive(assignment, exercise, source) < similarity.MIN_SHARED:
            continue
        checked += 1
        answers = {"original": source, "copier": copy} | corpus_answers(assignment, exercise)
        if frozenset(("original", "copier")) not in flagged(
                exercise_pairs(assignment, exercise, answers, starter_code(assignment)[exercise])):
            missed.append(f"{assignment}/{exercise}")
    assert checked >= 25 and not missed, f"{how}: {checked} checked, copies not flagged: {missed}"


def corpus_answers(assignment: str, exercise: str) -> dict[str, str]:
    """{"correct<n>": source} of the held-out corpus's correct answers to one exercise."""
    found = [e.cells[exercise] for e in load_corpus([assignment]) if e.kind == "correct" and exercise in e.cells]
    return {f"correct{n}": source for n, source in enumerate(found)}


def test_the_corpus_of_correct_answers_written_differently_has_no_pair_flagged():
    compared = 0
    for assignment, exercise, _ in reference_answers():
        answers = corpus_answers(assignment, exercise)
        compared += len(answers) * (len(answers) - 1) // 2
        pairs = exercise_pairs(assignment, exercise, answers, starter_code(assignment)[exercise])
        assert not pairs, [(p.assignment, p.exercise, p.student_a, p.student_b, p.score) for p in pairs]
    assert compared >= 20


def test_untouched_starter_code_is_never_a_match():
    answers = {"ann": CONV_STARTER, "ben": CONV_STARTER + "\n# I gave up\n", "cat": CONV}
    assert exercise_pairs("01_tensors", "conv2d_single", answers, CONV_STARTER) == []


def test_starter_code_does_not_count_towards_a_match():
    """Two answers that differ in what they add to a long given preamble: with the preamble counted, they match."""
    preamble = ("    rng = np.random.default_rng(config['seed'])\n    weights = rng.normal(size=(x.shape[1], scale))\n"
                "    bias = np.zeros(scale) + offset\n    centred = x - x.mean(axis=0, keepdims=True)\n"
                "    scaled = centred / (x.std(axis=0) + 1e-8)\n    x = scaled @ weights + bias\n")
    starter = f"def solve(config, scale, offset, x):\n{preamble}    # YOUR CODE HERE\n    raise NotImplementedError()\n"
    ann = f"def solve(config, scale, offset, x):\n{preamble}    return x.sum()\n"
    ben = f"def solve(config, scale, offset, x):\n{preamble}    return x.max()\n"
    assert exercise_pairs("a", "solve", {"ann": ann, "ben": ben}, "") != []  # the preamble alone would flag them
    assert exercise_pairs("a", "solve", {"ann": ann, "ben": ben}, starter) == []


def test_what_a_large_part_of_the_class_writes_alike_is_an_idiom_not_a_lead():
    """40 students hand in the canonical answer (an idiom: no pair), two share an unusual one (flagged)."""
    unusual = ("def conv2d_single(x, w, stride):\n    rows = []\n    for top in range(0, x.shape[0] - w.shape[0] + 1, "
               "stride):\n        row = [float((x[top:top + w.shape[0], left:left + w.shape[1]] * w).sum())\n"
               "               for left in range(0, x.shape[1] - w.shape[1] + 1, stride)]\n"
               "        rows.append(row)\n    result = np.array(rows, dtype=x.dtype)\n    return result\n")
    answers = {f"s{n:02d}": CONV for n in range(40)} | {"yan": unusual, "zoe": renamed(unusual)}
    assert flagged(exercise_pairs("01_tensors", "conv2d_single", answers, CONV_STARTER)) == {frozenset(("yan", "zoe"))}


# --- reading the class, the CSV, the report's section -----------------------------------------------------------

def write_graded(out: Path, student: str, assignment: str, answers: dict[str, str]) -> None:
    path = out / "autograded" / student / assignment / f"{assignment}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    cells = [c for name, source in answers.items() for c in (answer_cell(name, source), graded_cell(f"test_{name}"))]
    nbformat.write(notebook(*cells), path)


def test_the_class_is_read_from_the_graded_notebooks_and_hostile_ones_are_skipped(tmp_path):
    write_graded(tmp_path, "ann", "01_tensors", {"conv2d_single": CONV})
    write_graded(tmp_path, "ben", "01_tensors", {"conv2d_single": renamed(CONV)})
    broken = tmp_path / "autograded" / "eve" / "01_tensors" / "01_tensors.ipynb"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"cells": [1, {"metadata": []}, {"cell_type": "code", "metadata": {"nbgrader": '
                      '{"solution": true, "grade_id": 7}}, "source": "x"}, {"cell_type": "code", "metadata": '
                      '{"nbgrader": {"solution": true, "grade_id": "conv2d_single"}}, "source": ["a = ", 1]}]}')
    (tmp_path / "autograded" / "mal" / "01_tensors").mkdir(parents=True)
    (tmp_path / "autograded" / "mal" / "01_tensors" / "01_tensors.ipynb").write_bytes(b"\xff\xfe not json")
    answers = similarity.class_answers(tmp_path)
    assert set(answers["01_tensors"]["conv2d_single"]) == {"ann", "ben"}
    pairs = similar_pairs(answers, tmp_path / "no-release")
    assert flagged(pairs) == {frozenset(("ann", "ben"))}
    assert solution_cells(broken) == {}


def test_the_pairs_csv_keeps_student_ids_from_running_as_formulas(tmp_path):
    pairs = exercise_pairs("01_tensors", "conv2d_single", {"=HYPERLINK(1)": CONV, "@ben": commented(CONV)},
                           CONV_STARTER)
    text = write_pairs(tmp_path, pairs).read_text(encoding="utf-8")
    assert "'=HYPERLINK(1)" in text and "'@ben" in text
    assert [(r["student_a"], r["student_b"]) for r in read_rows(tmp_path / "similar-pairs.csv")] == [
        ("=HYPERLINK(1)", "@ben")]


def test_marks_cover_what_is_shared_and_everything_is_escaped():
    spans = ((0, 3), (10, 14))
    shown = marked_source("<b>&x = '</script>'", spans)
    assert shown == "<mark>&lt;b&gt;</mark>&amp;x = &#x27;&lt;<mark>/scr</mark>ipt&gt;&#x27;"
    pair = exercise_pairs("01_tensors", "conv2d_single", {"<img src=x>": CONV, "b": reordered(CONV)}, CONV_STARTER)[0]
    section = render([pair], 2, 2)
    assert "<img src=x>" not in section and "&lt;img src=x&gt;" in section
    assert section.count("<mark>") >= 4 and "never a grade" in section


def test_the_section_is_capped_and_points_to_the_csv(tmp_path):
    answers = {f"s{n:02d}": renamed(CONV) if n % 2 else CONV for n in range(10)}  # at the idiom floor: all 45 pairs
    pairs = [p for exercise in ("conv_a", "conv_b") for p in exercise_pairs("01_tensors", exercise, answers, "")]
    assert len(pairs) == 90 > MAX_PAIRS_SHOWN
    section = render(pairs, 10, 20)
    assert section.count('<details class="pair"') == MAX_PAIRS_SHOWN and "all 90 are in" in section


def test_the_class_report_has_the_section_and_the_feedback_does_not(tmp_path):
    for student, source in (("ann", CONV), ("ben", all_at_once(CONV))):
        write_graded(tmp_path, student, "01_tensors", {"conv2d_single": source})
    rows = [CellResult(s, "01_tensors", "test_conv2d_single", 1.0, 1.0, "passed", "", "") for s in ("ann", "ben")]
    write_csvs(tmp_path, rows)
    page = build_report(tmp_path).read_text(encoding="utf-8")
    assert 'id="similar-submissions"' in page and "<b>ann</b> and <b>ben</b>" in page and "never a grade" in page
    assert [(r["student_a"], r["student_b"]) for r in read_rows(tmp_path / "similar-pairs.csv")] == [("ann", "ben")]
    write_feedback(tmp_path, "ann", "01_tensors", rows[:1])
    feedback = next((tmp_path / "feedback" / "ann").rglob("*.html")).read_text(encoding="utf-8")
    assert "ben" not in feedback and "imilar" not in feedback


def test_a_failing_comparison_costs_the_section_not_the_report(tmp_path, monkeypatch, capsys):
    def broken(*_):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr("autograder.grading.similarity_report.class_answers", broken)
    section = similarity_section(tmp_path)
    assert "Not built: RuntimeError: disk on fire" in section and "WARNING" in capsys.readouterr().err


def test_pairs_are_listed_once_and_in_a_stable_order():
    answers = {name: renamed(CONV) if name in "bd" else CONV for name in "abcd"}
    first = exercise_pairs("01_tensors", "conv2d_single", answers, CONV_STARTER)
    again = exercise_pairs("01_tensors", "conv2d_single", dict(reversed(answers.items())), CONV_STARTER)
    assert [(p.student_a, p.student_b) for p in first] == [(p.student_a, p.student_b) for p in again]
    assert flagged(first) == {frozenset(pair) for pair in itertools.combinations("abcd", 2)}
