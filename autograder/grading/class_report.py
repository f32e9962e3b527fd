"""The class report: OUT/results.csv (and OUT/timings.csv when there) -> OUT/report.html.

One self-contained page a TA opens after a run (figures embedded as PNG, no script, nothing
fetched), per assignment: the score histogram, each test's pass rate on each device with its most
common failure messages, the exercises ranked by how many students lost points there, the
error/timeout/tampered/skipped counts and the time per submission. It reads only results.csv, whose
messages are already what a student may see (results.py keeps the exception's name and message,
never a traceback quoting hidden test source), so a report can be rebuilt for any old run:

    python -m autograder.grading.class_report OUT

Everything is aggregated (histograms, top-k messages, one row per test), never one row per
student, so the page is as long for a class of 1,000 as for a class of 10.

Its last section, for the TA alone, lists pairs of students whose answers to an exercise are
suspiciously alike (a lead, never a grade): similarity_report.py builds it from OUT/autograded.
"""

from __future__ import annotations

import base64
import functools
import html
import io
import math
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

from autograder.grading.csv_cells import read_rows
from autograder.grading.report import mistakes_found, read_results, totals
from autograder.grading.results import CellResult
from autograder.grading.similarity_report import SECTION_ID as SIMILARITY_ID
from autograder.grading.similarity_report import STYLE as SIMILARITY_STYLE
from autograder.grading.similarity_report import similarity_section
from dlkit.devices import KNOWN_KINDS

TOP_MESSAGES = 3        # failure messages shown per test and device
MESSAGE_CHARS = 240     # a grouped message is cut here: the page stays readable, the feedback has the rest
PROBLEM_STATUSES = ("error", "timeout", "tampered", "skipped")
NO_DEVICE = "(no device)"  # the column of test cells that check no device
# What differs from student to student in the same mistake: the seed suffix the checks append, a
# scratch folder, and numbers (values, shapes, addresses). Removed, the same mistake is one group.
_SEED_SUFFIX = re.compile(r"\s*\[inputs: dlkit\.seed_everything\(\d+\)\]\s*$")
_SCRATCH = re.compile(r"/tmp/[\w.-]+")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")


def _clean(message: str) -> str:
    """A message without the seed suffix and scratch paths, on one line."""
    text = _SCRATCH.sub("/tmp/…", _SEED_SUFFIX.sub("", message))
    return _SPACE.sub(" ", _HEX.sub("0x#", text)).strip()


def message_group(message: str) -> str:
    """The group of a failure message: with its numbers replaced, one mistake is one group.

    "expected 3.0, got 2.5 [inputs: dlkit.seed_everything(42)]" -> "expected #, got #".
    """
    return _NUMBER.sub("#", _clean(message))


def group_messages(messages: list[str]) -> list[tuple[str, int]]:
    """The groups of `messages`, most common first, each as (what to show, how many).

    What is shown keeps the numbers every message of the group agrees on (sizes, shapes of the
    test's own inputs) and writes "#" for those that differ from student to student (the values
    their code got); it is cut at MESSAGE_CHARS.
    """
    groups: dict[tuple[str, ...], list[list[str]]] = defaultdict(list)
    for message in messages:
        text = _clean(message)
        groups[tuple(_NUMBER.split(text))].append(_NUMBER.findall(text))
    shown = []
    for between, numbers in groups.items():
        slots = [values[0] if len(set(values)) == 1 else "#" for values in zip(*numbers)] + [""]
        text = "".join(part + slot for part, slot in zip(between, slots))
        text = text if len(text) <= MESSAGE_CHARS else text[:MESSAGE_CHARS - 1] + "…"
        shown.append((text, len(numbers)))
    return sorted(shown, key=lambda item: -item[1])


def read_timings(out: Path) -> dict[str, list[float]]:
    """Seconds per submission by assignment, from OUT/timings.csv; empty when the run did not record them."""
    path = out / "timings.csv"
    if not path.exists():
        return {}
    seconds: dict[str, list[float]] = defaultdict(list)
    for r in read_rows(path):
        seconds[r["assignment"]].append(float(r["seconds"]))
    return seconds


def _subplots(figsize: tuple[float, float]):
    """A figure and its axes, outside pyplot: no backend is chosen, no window can open, nothing global
    changes (pyplot would need `matplotlib.use("Agg")`, whatever the caller's MPLBACKEND). Imported here, not
    with the module: a grading run builds its figures in another process (pipeline.ReportSections), and the
    driver, which only puts the page together, need not pay matplotlib's ~1 s import."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots()


def warm_up() -> None:
    """Import matplotlib and draw one small figure, which loads its fonts: ~1 s paid once, by a process that
    builds sections later (pipeline.ReportSections), while it has nothing else to do."""
    _png(_subplots(figsize=(1, 1))[0])


def _integer_ticks():
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def _names_as_text(draw):
    """`draw` (a chart) with matplotlib's maths parsing off: an assignment or test name is data, and a folder
    named "01_tensors$$" once stopped the report as unbalanced maths."""
    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        from matplotlib import rc_context

        with rc_context({"text.parse_math": False, "text.usetex": False}):
            return draw(*args, **kwargs)
    return drawn


def _png(fig) -> str:
    """A figure as an <img> with the PNG inline (the page must open with no network and no side files)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img class="figure" alt="figure" src="data:image/png;base64,{data}">'


def _device_order(devices: set[str]) -> list[str]:
    order = {kind: i for i, kind in enumerate(KNOWN_KINDS)}
    return sorted(devices, key=lambda d: (d == "", order.get(d, len(order)), d))


def _table(header: list[str], rows: list[list[str]], numeric_from: int = 1) -> str:
    """An HTML table; cells are already escaped HTML. Columns from `numeric_from` on are right-aligned."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "".join("<tr>" + "".join(f'<td class="{"num" if i >= numeric_from else ""}">{c}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


@_names_as_text
def score_histogram(percent: list[float], assignment: str) -> str:
    fig, ax = _subplots(figsize=(6, 2.6))
    ax.hist(percent, bins=[i * 5 for i in range(21)], color="#4c72b0", edgecolor="white")
    ax.set_xlabel("score (% of the maximum)")
    ax.set_ylabel("students")
    ax.yaxis.set_major_locator(_integer_ticks())
    ax.set_xlim(0, 100)
    ax.set_title(f"{assignment}: scores of {len(percent)} students")
    return _png(fig)


@_names_as_text
def lost_points_chart(ranked: list[tuple[str, int]], students: int, assignment: str) -> str:
    fig, ax = _subplots(figsize=(6, 0.3 * len(ranked) + 1))
    names, counts = [g for g, _ in ranked][::-1], [n for _, n in ranked][::-1]
    ax.barh(names, [100 * n / students for n in counts], color="#dd8452")
    ax.set_xlabel("% of students who lost points")
    ax.set_xlim(0, 100)
    ax.set_title(f"{assignment}: where points were lost")
    return _png(fig)


@_names_as_text
def time_histogram(seconds: list[float], assignment: str) -> str:
    fig, ax = _subplots(figsize=(6, 2.4))
    ax.hist(seconds, bins=30, color="#55a868", edgecolor="white")
    ax.set_xlabel("seconds to grade one submission")
    ax.set_ylabel("submissions")
    ax.yaxis.set_major_locator(_integer_ticks())
    ax.set_title(f"{assignment}: grading time")
    return _png(fig)


def pass_rate_table(rows: list[CellResult], tests: list[str], devices: list[str]) -> str:
    """One row per test: its pass rate on each device, and its TOP_MESSAGES failure groups per device."""
    by_test_device: dict[tuple[str, str], list[CellResult]] = defaultdict(list)
    for r in rows:
        by_test_device[(r.grade_id, r.device)].append(r)
    header = ["test"] + [html.escape(d or NO_DEVICE) for d in devices] + ["most common failure messages (count)"]
    table_rows = []
    for g in tests:
        cells, failures = [f"<code>{html.escape(g)}</code>"], []
        for d in devices:
            found = by_test_device.get((g, d), [])
            graded = [r for r in found if r.status != "skipped"]
            if not graded:
                cells.append("skipped" if found else "–")
                continue
            passed = sum(r.status == "passed" for r in graded)
            cells.append(f"{100 * passed / len(graded):.0f}% <small>({passed}/{len(graded)})</small>")
            groups = group_messages([r.message for r in graded if r.status != "passed"])
            for text, n in groups[:TOP_MESSAGES]:
                where = f"{html.escape(d)}: " if d and len(devices) > 1 else ""
                failures.append(f"<li><b>{n}</b> × {where}<code>{html.escape(text)}</code></li>")
        cells.append(f'<ul class="messages">{"".join(failures)}</ul>' if failures else "")
        table_rows.append(cells)
    return _table(header, table_rows, 1)


def mistakes_table(rows: list[CellResult]) -> str:
    """Students per known mistake (hints.py): what the class got wrong, in the words its feedback used."""
    counts: Counter[tuple[str, str, str]] = Counter()
    for _, _, m in mistakes_found(rows):
        counts[(m.exercise, m.id, m.hint)] += 1
    heading = "<h3>Likely mistakes (the hints students got in their feedback)</h3>"
    if not counts:
        return heading + "<p>no failure matched a known mistake of this assignment (autograder/hints/)</p>"
    students = len({r.student_id for r in rows})
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    share = [f"{100 * n / max(students, 1):.0f}%" for _, n in ranked]
    return heading + _table(["exercise", "mistake", "hint", "students", "% of class"],
                            [[f"<code>{html.escape(e)}</code>", html.escape(i), html.escape(h), str(n), pct]
                             for ((e, i, h), n), pct in zip(ranked, share)], 3)


def assignment_section(assignment: str, rows: list[CellResult], seconds: list[float]) -> str:
    """The report's part for one assignment."""
    scores = totals(rows)
    students = len(scores)
    percent = [100 * s / top if top else 0.0 for s, top in scores.values()]
    tests = list(dict.fromkeys(r.grade_id for r in rows))  # notebook order, as results.csv lists them
    devices = _device_order({r.device for r in rows})
    lost: Counter[str] = Counter()
    seen_cells = set()
    for r in rows:
        if (r.student_id, r.grade_id) not in seen_cells:
            seen_cells.add((r.student_id, r.grade_id))
            lost[r.grade_id] += r.score < r.max_score
    parts = [f'<section class="assignment" id="{html.escape(assignment)}"><h2>{html.escape(assignment)}</h2>']

    mean = statistics.fmean(percent) if percent else 0.0
    median = statistics.median(percent) if percent else 0.0
    full = sum(p >= 100 for p in percent)
    parts.append("<h3>Scores</h3>" + _table(
        ["students", "mean %", "median %", "full marks", "zero"],
        [[str(students), f"{mean:.1f}", f"{median:.1f}", str(full), str(sum(p == 0 for p in percent))]], 0))
    parts.append(score_histogram(percent, assignment))

    ranked = sorted(((g, lost[g]) for g in tests), key=lambda item: (-item[1], tests.index(item[0])))
    parts.append("<h3>Exercises ranked by students who lost points there</h3>")
    parts.append(_table(["rank", "test", "students who lost points", "% of class"],
                        [[str(i), f"<code>{html.escape(g)}</code>", str(n), f"{100 * n / max(students, 1):.0f}%"]
                         for i, (g, n) in enumerate(ranked, 1)], 2))
    if any(n for _, n in ranked):
        parts.append(lost_points_chart([item for item in ranked if item[1]], students, assignment))

    parts.append(mistakes_table(rows))

    parts.append("<h3>Pass rate of each test on each device, and the most common failures</h3>")
    parts.append(pass_rate_table(rows, tests, devices))

    by_status: Counter[str] = Counter()
    submissions: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        if r.status in PROBLEM_STATUSES:
            by_status[r.status] += 1
            submissions[r.status].add(r.student_id)
    parts.append("<h3>Errors, timeouts, tampering and skipped devices</h3>")
    parts.append(_table(["status", "test rows", "students"],
                        [[s, str(by_status[s]), str(len(submissions[s]))] for s in PROBLEM_STATUSES], 1))

    parts.append("<h3>Time per submission</h3>")
    if seconds:
        ordered = sorted(seconds)
        p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        parts.append(_table(["submissions timed", "median s", "90th percentile s", "slowest s", "total min"],
                            [[str(len(seconds)), f"{statistics.median(seconds):.1f}", f"{p90:.1f}",
                              f"{ordered[-1]:.1f}", f"{math.fsum(seconds) / 60:.1f}"]], 0))
        parts.append(time_histogram(seconds, assignment))
    else:
        parts.append("<p>not recorded (no timings.csv, or every submission was graded by an earlier run)</p>")
    parts.append("</section>")
    return "\n".join(parts)


STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 75em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; vertical-align: top; text-align: left; }
td.num { text-align: right; white-space: nowrap; }
th { background: #f0f0f0; }
ul.messages { margin: 0; padding-left: 1.2em; text-align: left; white-space: normal; }
code { font-size: 0.9em; word-break: break-word; }
img.figure { display: block; margin: 0.5em 0; }
section.assignment { border-top: 2px solid #888; margin-top: 2em; }
"""


def build_report(out: Path) -> Path:
    """Write OUT/report.html from OUT/results.csv (and OUT/timings.csv); return its path."""
    return write_report(out, read_results(out), read_timings(out))


def write_report(out: Path, rows: list[CellResult], seconds: dict[str, list[float]],
                 sections: dict[str, str] | None = None) -> Path:
    """Write OUT/report.html from `rows` (in results.csv's order) and the seconds per submission of each
    assignment; return its path.

    `sections` holds assignment sections already built from the same rows and seconds: a grading run
    builds each assignment's section as soon as its last submission is graded, while the workers go
    on, so that the end of the run, when every core but one is idle, renders only what is left.
    """
    by_assignment: dict[str, list[CellResult]] = defaultdict(list)
    for r in rows:
        by_assignment[r.assignment].append(r)
    names = sorted(by_assignment)
    students = len({r.student_id for r in rows})
    built = sections or {}
    contents = "".join(f'<li><a href="#{html.escape(a)}">{html.escape(a)}</a></li>' for a in names)
    parts = [built.get(a) or assignment_section(a, by_assignment[a], seconds.get(a, [])) for a in names]
    contents += f'<li><a href="#{SIMILARITY_ID}">Similar submissions</a> (for the TA: a lead, never a grade)</li>'
    parts.append(similarity_section(out))  # from OUT/autograded: pairs of alike answers (similarity_report.py)
    page = (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>Class report</title>'
            f"<style>{STYLE}{SIMILARITY_STYLE}</style></head><body><h1>Class report</h1>"
            f"<p>{students} students, {len(names)} assignment{'s' if len(names) != 1 else ''}, "
            f"{len(rows)} test results "
            f"(from <code>results.csv</code>). Messages are the ones students see in their feedback.</p>"
            f"<ul>{contents}</ul>{''.join(parts)}</body></html>\n")
    path = out / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m autograder.grading.class_report OUT   (OUT holds results.csv)", file=sys.stderr)
        return 2
    out = Path(argv[0])
    if not (out / "results.csv").exists():
        print(f"error: {out / 'results.csv'} not found", file=sys.stderr)
        return 2
    print(f"wrote {build_report(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
