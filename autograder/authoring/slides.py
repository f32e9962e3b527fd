"""Lecture slides from the instructor notebooks: `make slides` writes build/slides/.

For each source notebook this writes
  build/slides/<name>.slides.html   a reveal.js deck: explanations, solutions, demos and their plots
  build/slides/<name>.ipynb         the lecture copy: the same notebook with every output in it
by executing the notebook (solutions included; plots embedded as PNG) and exporting it with
nbconvert's SlidesExporter. Where the deck is cut is each cell's `metadata.slideshow.slide_type`.
That metadata is set by rules (`slide_type` below), never by hand, so that an edited or merged
notebook gets consistent cuts again with `python -m autograder.authoring.slides --mark`; the slides test
fails when a notebook's cuts differ from what the rules say.

A deck is what a projector shows, so before export the solutions lose nbgrader's
`### BEGIN SOLUTION` / `### END SOLUTION` lines (or, with --without-solutions, become the stub
students get), and a section taller than reveal.js's frame continues on sub-slides below it
(slide_layout.py; the instructor's `"dlkit": {"slides": ...}` cell metadata can split or scale a
cell). `make slides-check` (autograder/verify/slide_fit.py) measures every slide in Chromium.

  build/slides/reveal.js/, mathjax/  what the decks load: they show with no network (a lecture hall's
                                    projector, a train), like the lecture copy and a live JupyterLab
reveal.js (its script, styles and fonts) comes from the sphinx-revealjs package and MathJax 2 (what
nbconvert's templates configure) from jupyter-server-mathjax, both PyPI packages in the course
environment, so nothing is downloaded from anywhere else. The template
(autograder/authoring/templates/reveal_offline) is nbconvert's reveal template less its CDN parts: reveal.js
loads as plain scripts instead of through RequireJS, without jQuery or Mermaid.

Usage: python -m autograder.authoring.slides [--mark] [--without-solutions] [assignment ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import jupyter_server_mathjax
import nbformat
import sphinx_revealjs
from nbconvert.exporters import SlidesExporter
from nbconvert.preprocessors import ExecutePreprocessor
from nbgrader.preprocessors import ClearSolutions
from nbgrader.utils import is_grade, is_locked, is_solution

from autograder.authoring.samples import without_solution_markers
from autograder.authoring.slide_layout import FRAME_HEIGHT, FRAME_WIDTH, fit_slides
from autograder.course import assignments, nbgrader_config, select
from autograder.paths import BUILD, TEMPLATES

SLIDES = BUILD / "slides"
# The kernel draws into the notebook (PNG outputs the deck embeds), whatever the caller's MPLBACKEND
# (grading sets Agg, which would leave the slides without a single plot).
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
SUMMARY_HEADING = "## What to remember"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
CELL_TIMEOUT = 600
# Where the decks find reveal.js and MathJax: folders next to them (copy_assets), named relative to the deck.
REVEAL_DIR = "reveal.js"
MATHJAX_DIR = "mathjax"
# The "white" theme's font (Source Sans Pro) ships with reveal.js; "simple", nbconvert's default, fetches Google Fonts.
REVEAL_THEME = "white"
MATHJAX_URL = f"{MATHJAX_DIR}/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
REVEAL_SOURCE = Path(sphinx_revealjs.__file__).parent / "_static" / "revealjs"
MATHJAX_SOURCE = Path(jupyter_server_mathjax.__file__).parent / "static"


def slide_type(cell: nbformat.NotebookNode, previous: nbformat.NotebookNode | None, after_summary: bool) -> str:
    """Where `cell` goes in the talk, from its kind and the previous cell shown.

    Sections (`#`, `##`) start slides; `###` subsections and exercises start sub-slides (reveal.js'
    vertical stack), so the left/right keys walk the sections and up/down their details. Code
    stays on the slide of the markdown that introduces it. Test cells (hidden tests included), the
    setup cell and housekeeping code after the summary are not part of the talk.
    """
    if is_grade(cell) or (cell.cell_type == "code" and is_locked(cell)):
        return "skip"
    if cell.cell_type == "markdown":
        text = cell.source.lstrip()
        if text.startswith(("# ", "## ")):
            return "slide"
        if text.startswith(("### ", "**Exercise")):
            return "subslide"
        return "subslide" if previous is not None and previous.cell_type == "code" else "-"
    if after_summary:
        return "skip"
    return "-" if previous is not None and previous.cell_type == "markdown" else "subslide"


def mark_slides(nb: nbformat.NotebookNode) -> bool:
    """Set every cell's slide_type by the rules; return whether anything changed."""
    changed, previous, after_summary = False, None, False
    for cell in nb.cells:
        after_summary = after_summary or (cell.cell_type == "markdown" and cell.source.startswith(SUMMARY_HEADING))
        kind = slide_type(cell, previous, after_summary)
        if cell.metadata.get("slideshow", {}).get("slide_type") != kind:
            cell.metadata["slideshow"] = {"slide_type": kind}
            changed = True
        if kind != "skip":
            previous = cell
    return changed


def mark_notebook(path: Path) -> bool:
    """Apply the slide rules to a notebook file in place, rewriting it only when a cut changed."""
    nb = nbformat.read(path, as_version=4)
    if not mark_slides(nb):
        return False
    nbformat.write(nb, path)
    return True


@contextlib.contextmanager
def _inline_plots() -> Iterator[None]:
    """Kernels started inside inherit MPLBACKEND=inline; the caller's value is restored afterwards."""
    before = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = INLINE_BACKEND
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = before


def execute(source: Path, timeout: int = CELL_TIMEOUT) -> nbformat.NotebookNode:
    """Run an instructor notebook top to bottom in a fresh kernel, in a scratch folder, and return it with outputs."""
    nb = nbformat.read(source, as_version=4)
    with _inline_plots(), tempfile.TemporaryDirectory(prefix="slides-") as scratch:
        ExecutePreprocessor(timeout=timeout, kernel_name="python3").preprocess(nb, {"metadata": {"path": scratch}})
    return nb


def drop_progress_bars(nb: nbformat.NotebookNode) -> None:
    """Remove the tqdm widgets: live progress means nothing once the run is over, and a saved
    widget either shows a stale bar (fetched from a CDN) or "Error displaying widget"."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = [out for out in cell.outputs if WIDGET_VIEW not in out.get("data", {})]
    nb.metadata.pop("widgets", None)


def present_solutions(nb: nbformat.NotebookNode, with_solutions: bool = True) -> nbformat.NotebookNode:
    """A copy of the notebook whose solution cells show clean code: the solution without nbgrader's
    markers, or (`with_solutions=False`) the stub the release gives students, from the kit's nbgrader config.

    Either way the notebook ran with its solutions, so the demos after an exercise show their results.
    """
    shown = nbformat.from_dict(nb)
    if not with_solutions:
        stubs = ClearSolutions(config=nbgrader_config(SLIDES))  # only its stub settings are used, not its folders
        return stubs.preprocess(shown, {})[0]
    for cell in shown.cells:
        if is_solution(cell) and cell.cell_type == "code":
            cell.source = without_solution_markers(cell.source)
    return shown


def export_slides(nb: nbformat.NotebookNode) -> str:
    """The reveal.js HTML of an executed notebook (laid out by slide_layout.fit_slides).

    The frame is slide_layout's 16:9 one, wide enough for about 126 characters of code; a slide
    that still overflows it is shrunk by the template, never scrolled (a projector shows no
    scroll bar worth using). The deck loads reveal.js and MathJax from folders next to it
    (copy_assets), never from a CDN.
    """
    exporter = SlidesExporter(reveal_transition="none", reveal_width=str(FRAME_WIDTH), reveal_height=str(FRAME_HEIGHT),
                              reveal_theme=REVEAL_THEME, reveal_url_prefix=REVEAL_DIR, mathjax_url=MATHJAX_URL,
                              extra_template_basedirs=[str(TEMPLATES)], template_name="reveal_offline")
    html, _ = exporter.from_notebook_node(nb)
    return html


def copy_assets(out: Path) -> None:
    """Put reveal.js (dist/ and plugin/: script, styles, theme fonts) and MathJax next to the decks in `out`."""
    for part in ("dist", "plugin"):
        shutil.copytree(REVEAL_SOURCE / part, out / REVEAL_DIR / part, dirs_exist_ok=True)
    shutil.copytree(MATHJAX_SOURCE, out / MATHJAX_DIR, dirs_exist_ok=True)


def build_slides(names: list[str] | None = None, out: Path = SLIDES, with_solutions: bool = True) -> dict[str, Path]:
    """Execute and export the named notebooks (all by default); return each deck's path.

    `with_solutions=False` shows the students' stubs in place of the solutions (the lecture copy keeps them).
    """
    sources = select(names)
    out.mkdir(parents=True, exist_ok=True)
    copy_assets(out)
    decks = {}
    for name in sources:
        nb = execute(sources[name])
        drop_progress_bars(nb)
        mark_slides(nb)  # a notebook edited since the last --mark still gets consistent cuts
        nbformat.write(nb, out / f"{name}.ipynb")
        decks[name] = out / f"{name}.slides.html"
        decks[name].write_text(export_slides(fit_slides(present_solutions(nb, with_solutions))), encoding="utf-8")
    return decks


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="assignments (default: all)")
    parser.add_argument("--mark", action="store_true",
                        help="only (re)apply the slide cuts to the source notebooks in notebooks/")
    parser.add_argument("--without-solutions", action="store_true",
                        help="show the students' stubs (`raise NotImplementedError()`) in place of the solutions")
    args = parser.parse_args(argv)
    if args.mark:
        for name, path in assignments().items():
            if not args.names or name in args.names:
                print(f"{'marked' if mark_notebook(path) else 'unchanged'}: {path.name}")
        return 0
    try:
        decks = build_slides(args.names or None, with_solutions=not args.without_solutions)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for name, path in decks.items():
        print(f"slides {name}: {path.relative_to(BUILD.parent)} (lecture copy with outputs: {name}.ipynb)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
