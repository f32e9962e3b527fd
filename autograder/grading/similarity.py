"""Pairs of students whose answers to the same exercise are suspiciously alike: a lead for the TA, never a grade.

The answers are the solution cells of the graded notebooks (OUT/autograded/<student>/<assignment>/
<assignment>.ipynb: every cell in place, its nbgrader metadata restored), compared exercise by
exercise (a solution cell's grade_id), as MOSS compares programs:
1. each answer's fingerprints (fingerprints.py: comments, docstrings, layout and the names it binds
   normalised away), less the k-grams of the starter code everyone was given (the same cell in the
   release: signature, docstring, stub);
2. an inverted index, fingerprint -> the students whose answer has it; a fingerprint more than
   COMMON_SHARE of the answers (and more than COMMON_FLOOR of them) have is an idiom everybody writes,
   and is dropped, as MOSS's `-m` drops passages found in too many programs;
3. pairs come from the index's posting lists: each pair of students is counted once per fingerprint
   they share, in one pass over the index, and no two answers are ever diffed (bench/similarity.py's
   class of 1,000: ~140,000 counts per exercise, where diffing would take ~500,000 comparisons);
4. a pair's score is the share of the two answers' fingerprints (those left after 1 and 2) that they
   have in common, 2|A & B| / (|A| + |B|); it is flagged at FLAG_SCORE with at least MIN_SHARED
   fingerprints in common (an answer of a line or two is the same for everyone who got it right,
   copied or not, and is never flagged).

The thresholds were set on the kit's own answers: the held-out corpus of correct answers written
differently (autograder/corpus/) scores at most 0.59 among itself (0.86 for the closest with the
instructor's solution), while copies with renamed variables, reordered statements, added comments
or another layout score 0.95 to 1 (tests/unit/test_similarity.py holds both). A flagged pair is
where a person should look, not a finding.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter, defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from itertools import combinations
from multiprocessing import get_context
from pathlib import Path

from autograder.grading import interrupt
from autograder.grading.csv_cells import write_rows
from autograder.grading.fingerprints import K, Token, fingerprints, kgrams, normalised_tokens

COMMON_SHARE = 0.05  # a fingerprint in more than this share of an exercise's answers is an idiom, not a lead...
COMMON_FLOOR = 10    # ...and in a small class, one in more than this many answers (MOSS's default -m 10)
FLAG_SCORE = 0.9     # share of the two answers' fingerprints that they have in common
MIN_SHARED = 6       # fingerprints in common, at least: a few statements that are neither starter code nor idiom
PARALLEL_FROM = 2_000  # answers in a class, below which starting processes costs more than it saves

_LAYOUT = " \t(),"  # between two marked tokens of a line: marked with them
PAIR_COLUMNS = ["assignment", "exercise", "student_a", "student_b", "score", "shared_fingerprints"]


@dataclass(frozen=True)
class SimilarPair:
    """Two students' answers to one exercise, flagged, with the character spans of each that the other shares."""

    assignment: str
    exercise: str
    student_a: str
    student_b: str
    score: float
    shared: int
    source_a: str
    source_b: str
    marked_a: tuple[tuple[int, int], ...]
    marked_b: tuple[tuple[int, int], ...]


def solution_cells(notebook: Path) -> dict[str, str]:
    """{grade_id: source} of a notebook's solution code cells; empty for a file that is not a readable notebook.

    Read as plain JSON, without nbformat's validation (a class has thousands of notebooks); whatever is not
    shaped like a solution cell is skipped.
    """
    try:
        with open(notebook, encoding="utf-8") as f:
            cells = json.load(f).get("cells", [])
    except (OSError, ValueError, AttributeError, RecursionError):  # ValueError: not JSON, not UTF-8
        return {}
    found = {}
    for cell in cells if isinstance(cells, list) else []:
        meta = cell.get("metadata") if isinstance(cell, dict) else None
        meta = meta.get("nbgrader") if isinstance(meta, dict) else None
        if not (isinstance(meta, dict) and meta.get("solution") is True and cell.get("cell_type") == "code"):
            continue
        source, grade_id = cell.get("source", ""), meta.get("grade_id")
        if isinstance(source, list) and all(isinstance(line, str) for line in source):
            source = "".join(source)
        if isinstance(grade_id, str) and isinstance(source, str):
            found[grade_id] = source
    return found


def class_answers(out: Path) -> dict[str, dict[str, dict[str, str]]]:
    """{assignment: {exercise: {student: source}}} from OUT/autograded/<student>/<assignment>/<assignment>.ipynb."""
    answers: dict[str, dict[str, dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
    root = out / "autograded"
    for student in sorted(os.listdir(root)) if root.is_dir() else []:
        for assignment in sorted(os.listdir(root / student)) if (root / student).is_dir() else []:
            for exercise, source in solution_cells(root / student / assignment / f"{assignment}.ipynb").items():
                answers[assignment][exercise][student] = source
    return {assignment: dict(exercises) for assignment, exercises in answers.items()}


@dataclass(frozen=True)
class _Answer:
    student: str
    source: str
    tokens: list[Token]
    kgrams: list[tuple[int, int]]  # (position of the first token, hash), every statement's
    fingerprints: set[int]         # less the starter code's


def _fingerprinted(student: str, source: str, starter: set[int]) -> _Answer:
    tokens = normalised_tokens(source)
    statements = kgrams(tokens)
    return _Answer(student, source, tokens, [kg for statement in statements for kg in statement],
                   fingerprints(statements) - starter)


def _starter_kgrams(starter: str) -> set[int]:
    return {h for statement in kgrams(normalised_tokens(starter)) for _, h in statement}


def _marked(answer: _Answer, shared: set[int]) -> tuple[tuple[int, int], ...]:
    """The character spans of `answer` covered by a k-gram in `shared`; two on one line are one span when only what
    the fingerprints leave out is between them (spaces, parentheses, a trailing comma)."""
    covered = [False] * len(answer.tokens)
    for i, h in answer.kgrams:
        if h in shared:
            covered[i:i + K] = [True] * K
    spans: list[list[int]] = []
    for token, on in zip(answer.tokens, covered):
        if not on:
            continue
        if spans and not answer.source[spans[-1][1]:token.start].strip(_LAYOUT):  # one span, a line at a time
            spans[-1][1] = token.end
        else:
            spans.append([token.start, token.end])
    return tuple((start, end) for start, end in spans)


def _pair(assignment: str, exercise: str, a: _Answer, b: _Answer, score: float, shared: int,
          excluded: set[int]) -> SimilarPair:
    """A flagged pair, with what each answer shares with the other marked (every k-gram in both, not only the
    fingerprints, less the starter code's and the class's idioms)."""
    in_both = ({h for _, h in a.kgrams} & {h for _, h in b.kgrams}) - excluded
    return SimilarPair(assignment, exercise, a.student, b.student, round(score, 3), shared, a.source, b.source,
                       _marked(a, in_both), _marked(b, in_both))


def exercise_pairs(assignment: str, exercise: str, answers: dict[str, str], starter: str = "") -> list[SimilarPair]:
    """The flagged pairs among `answers` ({student: source}) to one exercise, highest score first."""
    starter_kgrams = _starter_kgrams(starter)
    answered = [answer for student, source in sorted(answers.items())
                if (answer := _fingerprinted(student, source, starter_kgrams)).fingerprints]
    index: dict[int, list[int]] = defaultdict(list)
    for number, answer in enumerate(answered):
        for fingerprint in answer.fingerprints:
            index[fingerprint].append(number)
    common_above = max(COMMON_FLOOR, COMMON_SHARE * len(answered))
    common = {fp for fp, students in index.items() if len(students) > common_above}
    distinct = [len(answer.fingerprints - common) for answer in answered]
    counts: Counter[tuple[int, int]] = Counter()
    for students in index.values():
        if 1 < len(students) <= common_above:
            counts.update(combinations(students, 2))
    pairs = [_pair(assignment, exercise, answered[i], answered[j], score, shared, starter_kgrams | common)
             for (i, j), shared in counts.items()
             if shared >= MIN_SHARED and (score := 2 * shared / (distinct[i] + distinct[j])) >= FLAG_SCORE]
    return sorted(pairs, key=lambda p: (-p.score, -p.shared, p.student_a, p.student_b))


def release_starters(release: Path, assignment: str) -> dict[str, str]:
    """{exercise: the starter code of its solution cell} from the release notebook; empty if there is none."""
    return solution_cells(release / assignment / f"{assignment}.ipynb")


def _exercise_pairs(task: tuple[str, str, dict[str, str], str]) -> list[SimilarPair]:
    return exercise_pairs(*task)


def similar_pairs(answers: dict[str, dict[str, dict[str, str]]], release: Path, workers: int = 1
                  ) -> list[SimilarPair]:
    """Every flagged pair among class_answers(), exercise by exercise, highest score first; the starter code is the
    release's (release/<assignment>/<assignment>.ipynb).

    Exercises are independent: with `workers` > 1 and a class of PARALLEL_FROM answers or more, they are compared
    in that many processes (forked on Linux, as the grading workers are; spawned elsewhere), which leave Ctrl-C to
    the driver, as the grading workers do. Fingerprinting is what takes the time (~0.7 ms of CPU an answer).
    """
    tasks = []
    for assignment, exercises in sorted(answers.items()):
        starters = release_starters(release, assignment)
        tasks += [(assignment, exercise, by_student, starters.get(exercise, ""))
                  for exercise, by_student in sorted(exercises.items())]
    tasks.sort(key=lambda task: -len(task[2]))  # the largest first: the last one handed out is short
    if workers < 2 or len(tasks) < 2 or sum(len(task[2]) for task in tasks) < PARALLEL_FROM:
        found = list(map(_exercise_pairs, tasks))
    else:
        method = "fork" if sys.platform.startswith("linux") else "spawn"
        pool = ProcessPoolExecutor(max_workers=min(workers, len(tasks)), mp_context=get_context(method),
                                   initializer=interrupt.leave_to_the_driver)
        try:
            found = list(pool.map(_exercise_pairs, tasks))
        finally:
            pool.shutdown(cancel_futures=True)
    pairs = [pair for exercise in found for pair in exercise]
    return sorted(pairs, key=lambda p: (-p.score, -p.shared, p.assignment, p.exercise, p.student_a, p.student_b))


def write_pairs(out: Path, pairs: list[SimilarPair]) -> Path:
    """OUT/similar-pairs.csv, every flagged pair (the report shows the first ones): for the TA, never for students.

    Student ids are folder names a student may have chosen: written inert (csv_cells.py), as every CSV of the kit.
    """
    path = out / "similar-pairs.csv"
    write_rows(path, PAIR_COLUMNS, ([p.assignment, p.exercise, p.student_a, p.student_b, f"{p.score:.3f}", p.shared]
                                    for p in pairs))
    return path
