"""The class report's section on similar submissions: flagged pairs, each with the two answers side by side.

The pairs come from similarity.py; every flagged pair goes to OUT/similar-pairs.csv, the page shows
the first MAX_PAIRS_SHOWN (highest score first), so it stays readable for a class of any size. Each
pair opens (a <details> element: no script) onto the two solution cells as the students wrote them,
the parts the other answer shares marked; starter code and the class's common idioms are never
marked, since they never counted.

It is for the TA only, and says so: a lead for a person to read, never a grade. Nothing of it goes
into the students' feedback, which feedback.py builds from results.csv alone.
"""

from __future__ import annotations

import html
import os
import sys
from collections import Counter
from pathlib import Path

from autograder.grading.similarity import (
    COMMON_FLOOR,
    COMMON_SHARE,
    FLAG_SCORE,
    MIN_SHARED,
    SimilarPair,
    class_answers,
    similar_pairs,
    write_pairs,
)
from autograder.paths import RELEASE

MAX_PAIRS_SHOWN = 50      # pairs on the page; similar-pairs.csv has them all
MAX_SOURCE_CHARS = 4_000  # of each answer shown: answers are a few hundred
SECTION_ID = "similar-submissions"

STYLE = """
section.similarity { border-top: 2px solid #888; margin-top: 2em; }
p.lead-only { background: #fff4d6; border-left: 4px solid #e0a800; padding: 0.5em 0.8em; }
div.side-by-side { display: grid; grid-template-columns: 1fr 1fr; gap: 0.8em; margin: 0.5em 0 1em; }
div.side-by-side pre { margin: 0; padding: 0.5em; background: #f7f7f7; border: 1px solid #ddd; overflow-x: auto;
  font-size: 0.85em; white-space: pre-wrap; word-break: break-word; }
div.side-by-side h4 { margin: 0 0 0.3em; }
mark { background: #ffd27f; }
details.pair summary { cursor: pointer; padding: 0.2em 0; }
"""


def marked_source(source: str, spans: tuple[tuple[int, int], ...], limit: int = MAX_SOURCE_CHARS) -> str:
    """`source` as escaped HTML, the character `spans` in <mark>, cut at `limit` characters."""
    shown = source[:limit]
    parts, at = [], 0
    for start, end in spans:
        start, end = max(start, at), min(end, len(shown))
        if start >= end:
            continue
        parts += [html.escape(shown[at:start]), f"<mark>{html.escape(shown[start:end])}</mark>"]
        at = end
    parts.append(html.escape(shown[at:]))
    if len(source) > limit:
        parts.append(f"\n… ({len(source) - limit:,} more characters)")
    return "".join(parts)


def _pair_block(number: int, pair: SimilarPair, together: int) -> str:
    """One pair: a summary line that opens onto the two answers side by side (the first pair open)."""
    a, b = html.escape(pair.student_a), html.escape(pair.student_b)
    also = f"; flagged on {together} exercises together" if together > 1 else ""
    summary = (f"<b>{number}.</b> {html.escape(pair.assignment)} / <code>{html.escape(pair.exercise)}</code>: "
               f"<b>{a}</b> and <b>{b}</b>, score {pair.score:.2f} ({pair.shared} fingerprints in common{also})")
    columns = "".join(f"<div><h4>{who}</h4><pre>{marked_source(source, spans)}</pre></div>"
                      for who, source, spans in ((a, pair.source_a, pair.marked_a), (b, pair.source_b, pair.marked_b)))
    return (f'<details class="pair"{" open" if number == 1 else ""}><summary>{summary}</summary>'
            f'<div class="side-by-side">{columns}</div></details>')


def render(pairs: list[SimilarPair], students: int, answers: int) -> str:
    """The section's HTML for `pairs` found among `answers` solution cells of `students` students."""
    parts = [f'<section class="similarity" id="{SECTION_ID}"><h2>Similar submissions</h2>',
             '<p class="lead-only"><b>A lead for a person, never a grade.</b> Two answers can be alike because the '
             "students worked together, copied, or found the same example; only reading them tells. Nothing of this "
             "section reaches students: their feedback is built from the test results alone.</p>",
             f"<p>Compared: {answers:,} answers of {students:,} students, exercise by exercise (each solution cell "
             "with the same cell of the others), after removing comments, docstrings, layout and the names each "
             "answer binds. Starter code does not count, nor what more than "
             f"{COMMON_SHARE:.0%} of the class (and more than {COMMON_FLOOR} students) wrote alike. A pair is flagged "
             f"when at least {FLAG_SCORE:.0%} of the two answers' fingerprints are shared, {MIN_SHARED} or more "
             "(shorter answers are never flagged). Marked: what each answer shares with the other.</p>"]
    if not answers:
        parts.append("<p>Nothing to compare: no graded notebooks in <code>autograded/</code>.</p></section>")
        return "".join(parts)
    if not pairs:
        parts.append("<p>No pair of answers was flagged.</p></section>")
        return "".join(parts)
    together = Counter((p.student_a, p.student_b) for p in pairs)
    more = (f" (the {MAX_PAIRS_SHOWN} highest shown; all {len(pairs):,} are in <code>similar-pairs.csv</code>)"
            if len(pairs) > MAX_PAIRS_SHOWN else " (also in <code>similar-pairs.csv</code>)")
    parts.append(f"<p><b>{len(pairs):,} pairs flagged</b>{more}:</p>")
    parts += [_pair_block(n, p, together[(p.student_a, p.student_b)]) for n, p in enumerate(pairs[:MAX_PAIRS_SHOWN], 1)]
    parts.append("</section>")
    return "".join(parts)


def similarity_section(out: Path, release: Path = RELEASE) -> str:
    """The section for the class graded into OUT (its OUT/autograded notebooks), writing OUT/similar-pairs.csv.

    A failure here must not cost the rest of the report: the section then says what went wrong.
    """
    try:
        answers = class_answers(out)
        pairs = similar_pairs(answers, release, workers=os.cpu_count() or 1)
        write_pairs(out, pairs)
        students = {s for exercises in answers.values() for by_student in exercises.values() for s in by_student}
        count = sum(len(by_student) for exercises in answers.values() for by_student in exercises.values())
        return render(pairs, len(students), count)
    except Exception as err:  # noqa: BLE001 - the grades and the rest of the report matter more
        print(f"WARNING: the class report's similarity section: {type(err).__name__}: {err}", file=sys.stderr)
        return (f'<section class="similarity" id="{SECTION_ID}"><h2>Similar submissions</h2><p>Not built: '
                f"{html.escape(type(err).__name__)}: {html.escape(str(err))}</p></section>")
