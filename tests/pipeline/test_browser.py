"""What a student and a TA see, in a real (headless) Chromium.

The student: the release notebook run in JupyterLab. The TA: the class report of the compact class.
The instructor: a lecture deck shown with the network blocked, and every slide of two decks measured on
a 1280x720 projector (`make slides-check` measures all eight).

The reference submission (the release with the solutions filled in) must run top to bottom with
no error and its plots drawn. In the blank release every cell is run, and the only errors allowed
are the stubs' `NotImplementedError` (a test cell, or a demo that calls an exercise), never a broken
import, a missing data file or a demo that fails on its own. Screenshots of both
are saved in the test's tmp_path folder.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections import Counter
from pathlib import Path

import nbformat
import pytest
from selenium.webdriver.common.by import By

from autograder.authoring.samples import SUBMISSIONS
from autograder.authoring.slide_layout import fit_slides
from autograder.authoring.slides import copy_assets, export_slides
from autograder.paths import BUILD
from autograder.verify.slide_fit import measure_deck, over_the_frame, problems, show_as_projector
from tests.pipeline.browser import chromium, jupyter_lab, missing_browser, wait_for

pytestmark = pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser()))

ASSIGNMENT = "01_tensors"   # the quickest notebook (about 7 s of kernel time)
RUN_TIMEOUT = 240           # seconds for Run All on a busy 2-core machine
TRACEBACK = "Traceback (most recent call last)"

# A snapshot of every code cell: its prompt ("[*]:" while queued or running) and its outputs.
CELLS_JS = """
return Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell')).map(cell => ({
  prompt: (cell.querySelector('.jp-InputArea-prompt') || {}).textContent || '',
  outputs: Array.from(cell.querySelectorAll('.jp-OutputArea-output')).map(out => ({text: out.textContent})),
  images: cell.querySelectorAll('.jp-OutputArea-output img').length}));
"""


def kernel_status(driver) -> str:
    return driver.execute_script(
        "const e = document.querySelector('.jp-Notebook-ExecutionIndicator'); return e ? e.dataset.status : '';")


def open_notebook(driver, server, name: str) -> None:
    """Open a notebook in JupyterLab and wait until its kernel has been idle for a few seconds.

    Right after the first "idle" the page may still reconnect to the kernel; cells run during
    that reconnection are silently lost, so a single idle reading is not enough.
    """
    driver.get(f"{server.url}/lab/tree/{name}?token={server.token}")
    wait_for(f"{name} to open", lambda: driver.execute_script(CELLS_JS), 90)
    idle_since = [None]

    def settled() -> bool:
        kernels = json.loads(server.get("/api/kernels"))
        idle = kernel_status(driver) == "idle" and any(
            k["execution_state"] == "idle" and k["connections"] > 0 for k in kernels)
        idle_since[0] = (idle_since[0] or time.monotonic()) if idle else None
        return idle and time.monotonic() - idle_since[0] >= 3
    wait_for("the kernel to start and settle", settled, 120)


def prompts(driver) -> list[str]:
    return [cell["prompt"] for cell in driver.execute_script(CELLS_JS)]


def run_from_menu(driver, item: str) -> list[dict]:
    """Click Run → `item`; wait until the run has begun and nothing is queued or running; return the cells."""
    before = prompts(driver)
    next(m for m in driver.find_elements(By.CSS_SELECTOR, ".lm-MenuBar-item") if m.text == "Run").click()
    wait_for(f"{item} in the Run menu", lambda: [label for label in driver.find_elements(
        By.CSS_SELECTOR, ".lm-Menu-item .lm-Menu-itemLabel") if label.text == item], 10)[0].click()
    wait_for("the cells to start running", lambda: prompts(driver) != before, 60)

    def finished() -> list[dict] | None:
        cells = driver.execute_script(CELLS_JS)
        busy = kernel_status(driver) != "idle" or any("[*]" in c["prompt"] for c in cells)
        return None if busy else cells
    wait_for(f"{item} to finish", finished, RUN_TIMEOUT, interval=1)
    return wait_for("the notebook to stay idle", finished, 10, interval=1)  # not a pause between two cells


def run_every_cell(driver) -> list[dict]:
    """Run All Cells; where an error stops the run, carry on from the next cell, until every code cell has run.

    JupyterLab stops Run All at the first error, so one Run All checks only up to the first
    error; a student who skips past it meets every later cell, and so does this.
    """
    cells = run_from_menu(driver, "Run All Cells")
    for _ in range(len(cells)):
        not_run = [i for i, cell in enumerate(cells) if not re.search(r"\[\d+\]", cell["prompt"])]
        if not not_run:
            break
        driver.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell .jp-InputArea-prompt")[not_run[0]].click()
        cells = run_from_menu(driver, "Run Selected Cell and All Below")
    return cells


def errors(cells: list[dict]) -> list[str]:
    """The tracebacks shown in the notebook; stderr warnings (same mime type, no traceback) are not errors."""
    return [out["text"] for cell in cells for out in cell["outputs"] if TRACEBACK in out["text"]]


def screenshot(driver, path: Path) -> Path:
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    return path


@pytest.fixture
def lab(release, tmp_path):
    """JupyterLab over a folder holding the blank release and the reference submission, and a browser."""
    root = tmp_path / "student"
    root.mkdir()
    shutil.copy(release[ASSIGNMENT], root / "blank.ipynb")
    shutil.copy(SUBMISSIONS / "reference" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", root / "reference.ipynb")
    with jupyter_lab(root, tmp_path) as server, chromium(tmp_path) as driver:
        try:
            yield server, driver
        finally:
            driver.save_screenshot(str(tmp_path / "last.png"))  # what the page showed when the test ended


def test_reference_submission_runs_in_jupyterlab_without_errors(lab, tmp_path):
    server, driver = lab
    open_notebook(driver, server, "reference.ipynb")
    cells = run_from_menu(driver, "Run All Cells")
    first_plot = driver.execute_script(
        "const img = document.querySelector('.jp-OutputArea-output img'); if (img) img.scrollIntoView(); return !!img;")
    screenshot(driver, tmp_path / "reference.png")
    assert not errors(cells), "errors while running the reference solution:\n" + "\n\n".join(errors(cells))[:3000]
    not_run = [c["prompt"] for c in cells if not re.search(r"\[\d+\]", c["prompt"])]
    assert not not_run, f"{len(not_run)} code cells did not run"
    assert first_plot and sum(c["images"] for c in cells) >= 3, "the measured plots should be drawn in the page"


def test_blank_release_fails_only_at_the_stubs(lab, tmp_path):
    server, driver = lab
    open_notebook(driver, server, "blank.ipynb")
    cells = run_every_cell(driver)
    screenshot(driver, tmp_path / "blank.png")
    shown = errors(cells)
    assert shown, "the blank release should fail where a function is not written yet"
    unexpected = [text for text in shown if "NotImplementedError" not in text]
    assert not unexpected, "errors other than the stubs' NotImplementedError:\n" + "\n\n".join(unexpected)[:3000]
    assert len(shown) < len(cells), "cells that use no exercise should run cleanly"


# The report's figures, and its ranked tests (first column: rank, second: the test), as the page shows them.
FIGURES_JS = """
return Array.from(document.querySelectorAll('img.figure')).map(img => img.complete && img.naturalWidth > 0);
"""
RANKED_JS = """
const heading = Array.from(document.querySelectorAll('h3')).find(h => h.textContent.startsWith('Exercises ranked'));
return Array.from(heading.nextElementSibling.querySelectorAll('tbody tr')).map(
  tr => [tr.cells[1].textContent, Number(tr.cells[2].textContent)]);
"""


def test_class_report_shows_figures_and_ranks_tests_by_the_students_who_lost_points(graded, tmp_path):
    """The TA: the compact class's report.html opened from disk, no server and no network."""
    with chromium(tmp_path) as driver:
        driver.get((graded.out / "report.html").as_uri())
        figures = driver.execute_script(FIGURES_JS)
        ranked = driver.execute_script(RANKED_JS)
        shot = BUILD / "screenshots" / "class_report.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        screenshot(driver, shot)
    assert len(figures) >= 3 and all(figures), f"figures drawn: {figures}"
    first = min(r["assignment"] for r in graded.results)  # the page's first section, which RANKED_JS reads
    lost = Counter(gid for _, gid in {(r["student_id"], r["grade_id"]) for r in graded.results
                                      if r["assignment"] == first and float(r["score"]) < float(r["max_score"])})
    assert [n for _, n in ranked] == sorted((n for _, n in ranked), reverse=True), ranked
    assert {test: n for test, n in ranked if n} == dict(lost), f"{first}: the page's ranking and results.csv differ"


# The deck, once reveal.js and MathJax have run: the slides, the math typeset on the slide that has some, the font.
DECK_JS = """
const done = arguments[arguments.length - 1];
if (!window.Reveal || !Reveal.isReady() || !window.MathJax || !MathJax.Hub) { done(null); return; }
const withMath = Array.from(document.querySelectorAll('.reveal .slides section'))
  .find(s => !s.querySelector('section') && s.textContent.includes('D_{ij}'));
if (!withMath) { done({slides: Reveal.getTotalSlides(), math: -1}); return; }
const where = Reveal.getIndices(withMath);
Reveal.slide(where.h, where.v);
MathJax.Hub.Queue(() => document.fonts.ready.then(() => done({
  slides: Reveal.getTotalSlides(),
  math: withMath.querySelectorAll('.MathJax, .MathJax_Display, .MathJax_CHTML').length,
  misplaced: Array.from(withMath.querySelectorAll('.MathJax')).filter(jax => {
    const box = jax.getBoundingClientRect();
    return Array.from(jax.querySelectorAll('.mi, .mo, .mn')).some(glyph => {
      const g = glyph.getBoundingClientRect();
      return g.width > 0 && (g.left < box.left - 2 || g.right > box.right + 2);
    });
  }).length,
  font: [...document.fonts].some(f => f.family.includes('Source Sans Pro') && f.status === 'loaded'),
  mathFont: [...document.fonts].some(f => f.family.startsWith('STIXMathJax') && f.status === 'loaded'),
})));
"""
# Whether the page can reach the internet: a fetch of a CDN address the stock template would use.
ONLINE_JS = """
const done = arguments[arguments.length - 1];
fetch('https://unpkg.com/reveal.js@4.0.2/dist/reveal.js', {mode: 'no-cors'}).then(() => done(true), () => done(false));
"""


def test_slides_render_with_math_with_the_network_blocked(lecture_decks, tmp_path):
    """A deck shows with no network: reveal.js, its font and MathJax come from the files `make slides` copied."""
    deck = lecture_decks[ASSIGNMENT]
    with chromium(tmp_path) as driver:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": ["http://*", "https://*"]})
        driver.get(deck.as_uri())
        assert driver.execute_async_script(ONLINE_JS) is False, "the network should be blocked for this test"
        shown = wait_for("reveal.js and MathJax to run", lambda: driver.execute_async_script(DECK_JS), 60)
        shot = BUILD / "screenshots" / "slides_offline.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        screenshot(driver, shot)
        missing = [e["message"] for e in driver.get_log("browser") if "ERR_FILE_NOT_FOUND" in e["message"]]
    assert not missing, f"files the deck loads are missing next to it: {missing}"
    assert shown["slides"] >= 6, f"the deck should have its slides: {shown}"
    assert shown["math"] > 0, f"the formula should be typeset by MathJax: {shown}"
    assert shown["misplaced"] == 0, f"a formula is drawn partly outside its box (typeset while hidden): {shown}"
    assert shown["font"] and shown["mathFont"], \
        f"the theme's and MathJax's fonts should load from the copied files: {shown}"


def test_every_slide_fits_the_projector_and_shows_no_solution_markers(lecture_decks, tmp_path):
    """Each slide of the decks, shown on a 1280x720 projector: none taller or wider than reveal.js's frame,
    no code line cut off at the side, nothing drawn too small to read, no `### BEGIN SOLUTION`."""
    with chromium(tmp_path) as driver:
        show_as_projector(driver)
        decks = [measure_deck(driver, path) for path in lecture_decks.values()]
    assert all(len(deck.slides) >= 10 for deck in decks), [(deck.name, len(deck.slides)) for deck in decks]
    failing = [line for deck in decks for line in problems(deck)]
    assert not failing, "slides that do not fit the projector:\n" + "\n".join(failing)


def test_a_slide_taller_than_the_frame_is_shrunk_to_fit_not_cut_off(tmp_path):
    """The template's last resort: a cell the instructor would not let be split (split_lines larger than the
    cell) makes a slide twice the frame's height, which is drawn smaller until all of it shows."""
    unsplittable = {"dlkit": {"slides": {"split_lines": 200}}, "slideshow": {"slide_type": "slide"}}
    cell = nbformat.v4.new_code_cell("\n".join(f"step_{i} = {i}" for i in range(80)), metadata=unsplittable)
    nb = nbformat.v4.new_notebook(cells=[cell])
    deck = tmp_path / "long.slides.html"
    copy_assets(tmp_path)
    deck.write_text(export_slides(fit_slides(nb)), encoding="utf-8")
    with chromium(tmp_path) as driver:
        show_as_projector(driver)
        shown = measure_deck(driver, deck)
    assert not over_the_frame(shown), problems(shown)
    assert len(shown.slides) == 1 and shown.slides[0].scale < 0.5, shown.slides
