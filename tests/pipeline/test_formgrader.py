"""A graded class opens in nbgrader's formgrader: the TA sees the assignments, the students and their scores.

`python -m autograder.grade` makes its output folder an nbgrader course directory (class
gradebook, source/, submitted/, autograded/); this opens a copy of the compact class's output
through the formgrader in headless Chromium, as a TA would.
"""

from __future__ import annotations

import shutil

import pytest
from selenium.webdriver.common.by import By

from tests.pipeline.browser import chromium, jupyter_lab, missing_browser, wait_for
from tests.pipeline.compact_class import SELECTED

pytestmark = [pytest.mark.pipeline,
              pytest.mark.skipif(missing_browser() is not None, reason=str(missing_browser()))]

ASSIGNMENT = "01_tensors"
#: Students whose gradebook rows are read on the page.
STUDENTS = ["reference", "buggy_fma"]


def page_text(driver) -> str:
    return driver.execute_script("return document.body ? document.body.innerText : '';")


def score_text(score: str, max_score: str) -> str:
    """A score as the formgrader prints it: `11 / 12`."""
    return f"{float(score):g} / {float(max_score):g}"


@pytest.mark.skipif(ASSIGNMENT not in SELECTED, reason=f"{ASSIGNMENT} is not graded")
def test_formgrader_lists_the_graded_class(graded, tmp_path):
    out = tmp_path / "course"
    shutil.copytree(graded.out, out)  # the formgrader may write to its course directory; the other tests read it
    grades = {student: graded.grade(student) for student in STUDENTS}

    with jupyter_lab(out, tmp_path / "lab", f"--CourseDirectory.root={out}") as server, \
            chromium(tmp_path / "lab") as driver:
        try:
            driver.get(f"{server.url}/formgrader?token={server.token}")
            wait_for("the formgrader to list the assignment", lambda: ASSIGNMENT in page_text(driver), 60)

            driver.get(f"{server.url}/formgrader/gradebook/{ASSIGNMENT}/{ASSIGNMENT}")
            wait_for("the notebook's submissions", lambda: "Submission #" in page_text(driver), 60)
            driver.find_element(By.XPATH, "//button[contains(., 'Show All Names')]").click()  # anonymous by default
            search = driver.find_element(By.CSS_SELECTOR, "input[type=search]")  # the class spans several pages
            for student, row in grades.items():
                search.clear()
                search.send_keys(student)
                line = wait_for(f"{student}'s row", lambda: next((ln for ln in page_text(driver).splitlines()
                                                                   if student in ln), None), 30)
                expected = score_text(row["score"], row["max_score"])
                assert expected in line, f"{student}: expected {expected} in the gradebook row {line!r}"
        finally:
            driver.save_screenshot(str(tmp_path / "formgrader.png"))
    assert (tmp_path / "formgrader.png").stat().st_size > 10_000
