"""What a student sees: the release notebook run in JupyterLab in a real (headless) Chromium.

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
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from autograder.samples import SUBMISSIONS

from .browser import chromium, jupyter_lab, missing_browser, wait_for

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
