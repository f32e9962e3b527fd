"""A graded class opens in nbgrader's formgrader: the TA sees the assignments, the students and their scores.

`python -m autograder.grade` makes its output folder an nbgrader course directory (class
gradebook, source/, submitted/, autograded/); this grades a tiny class and looks at it through
the formgrader in headless Chromium, as a TA would.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from selenium.webdriver.common.by import By

from autograder.authoring.samples import SUBMISSIONS
from autograder.paths import REPO

from .browser import chromium, jupyter_lab, missing_browser, wait_for
from .conftest import read_csv

pytestmark = [pytest.mark.pipeline,
              pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser()))]

ASSIGNMENT = "01_tensors"
STUDENTS = ["reference", "buggy_fma"]


def page_text(driver) -> str:
    return driver.execute_script("return document.body ? document.body.innerText : '';")


def score_text(score: str, max_score: str) -> str:
    """A score as the formgrader prints it: `11 / 12`."""
    return f"{float(score):g} / {float(max_score):g}"


def test_formgrader_lists_the_graded_class(release, tmp_path):
    class_dir, out = tmp_path / "class", tmp_path / "course"
    for student in STUDENTS:
        shutil.copytree(SUBMISSIONS / student / ASSIGNMENT, class_dir / student / ASSIGNMENT)
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--assignments",
                           ASSIGNMENT, "--workers", "1", "--cell-timeout", "45"],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    grades = {row["student_id"]: row for row in read_csv(out / "grades.csv")}
    assert set(grades) == set(STUDENTS)

    with jupyter_lab(out, tmp_path / "lab", f"--CourseDirectory.root={out}") as server, \
            chromium(tmp_path / "lab") as driver:
        try:
            driver.get(f"{server.url}/formgrader?token={server.token}")
            wait_for("the formgrader to list the assignment", lambda: ASSIGNMENT in page_text(driver), 60)

            driver.get(f"{server.url}/formgrader/gradebook/{ASSIGNMENT}/{ASSIGNMENT}")
            wait_for("the notebook's submissions", lambda: page_text(driver).count("Submission #") == len(STUDENTS), 60)
            driver.find_element(By.XPATH, "//button[contains(., 'Show All Names')]").click()  # anonymous by default
            wait_for("the students' names", lambda: all(s in page_text(driver) for s in STUDENTS), 30)
            text = page_text(driver)
            for student, row in grades.items():
                expected = score_text(row["score"], row["max_score"])
                line = next((ln for ln in text.splitlines() if student in ln), "")
                assert expected in line, f"{student}: expected {expected} in the gradebook row {line!r}"
        finally:
            driver.save_screenshot(str(tmp_path / "formgrader.png"))
    assert (tmp_path / "formgrader.png").stat().st_size > 10_000
