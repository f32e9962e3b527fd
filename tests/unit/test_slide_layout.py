"""Fitting slides into the frame, without a browser (tests/pipeline/test_browser.py measures real decks).

The notebooks here are small and made up; their cells carry outputs like an executed notebook's
(printed text, a PNG plot), since outputs count towards a slide's height.
"""

from __future__ import annotations

import base64
import io

import nbformat
import numpy as np
import pytest
from matplotlib.image import imsave

from autograder.authoring.slide_layout import (
    BUDGET,
    CODE_STRETCH,
    CODE_WIDTH,
    code_lines_per_page,
    estimated_height,
    fit_slides,
    sections,
    split_code,
)
from autograder.authoring.slides import export_slides, mark_slides
from autograder.course import assignments


def function(name: str, body_lines: int) -> str:
    body = "\n".join(f"    total += {i}" for i in range(body_lines))
    return f"def {name}():\n    total = 0\n{body}\n    return total\n"


def png_output(width: int, height: int) -> nbformat.NotebookNode:
    """A display_data output holding a white PNG of width x height pixels, as matplotlib's inline backend makes."""
    buffer = io.BytesIO()
    imsave(buffer, np.ones((height, width, 3)), format="png")
    encoded = base64.b64encode(buffer.getvalue()).decode()
    return nbformat.v4.new_output("display_data", data={"image/png": encoded, "text/plain": "<Figure>"})


def slide(cell: nbformat.NotebookNode, kind: str = "-") -> nbformat.NotebookNode:
    cell.metadata["slideshow"] = {"slide_type": kind}
    return cell


def code_lines(source: str) -> list[str]:
    return [line for line in source.splitlines() if line.strip()]


def section_heights(nb: nbformat.NotebookNode) -> list[float]:
    return [sum(estimated_height(nb.cells[i]) for i in group) for group in sections(nb)]


def tall_section() -> nbformat.NotebookNode:
    """One section three frames high, as 02_backprop's sigmoid neuron was: text, a 60-line cell, a plot, a printout."""
    text = "## A sigmoid neuron\n\n" + "\n\n".join("A paragraph of explanation that goes on. " * 6 for _ in range(4))
    code = nbformat.v4.new_code_cell(function("forward", 22) + "\n\n" + function("draw", 30) + "\nforward()\ndraw()\n",
                                     outputs=[png_output(1000, 400),
                                              nbformat.v4.new_output("stream", text="wire value\n" * 13)])
    hidden_test = slide(nbformat.v4.new_code_cell("assert forward() == 231"), "skip")
    closing = nbformat.v4.new_markdown_cell("## Next\n\nShort.")
    return nbformat.v4.new_notebook(cells=[slide(nbformat.v4.new_markdown_cell(text), "slide"), slide(code),
                                           hidden_test, slide(closing, "slide")])


def test_long_code_is_cut_between_top_level_statements():
    source = "\n".join(function(f"f{i}", 12) for i in range(4))
    pieces = split_code(source, max_lines=34)
    assert len(pieces) == 2
    assert all(piece.startswith("def ") and piece.rstrip().endswith("return total") for piece in pieces), pieces
    assert "\n\n".join(pieces) == source.strip("\n")


def test_code_is_never_cut_inside_brackets_or_strings():
    table = "rows = [\n" + "".join(f"    ({i}, {i * i}),\n" for i in range(30)) + "]\n"
    text = 'doc = """\n' + "a line of text\n" * 30 + '"""\n'
    pieces = split_code(table + text + "print(rows, doc)", max_lines=34, stretch_lines=39)
    assert pieces[0] == table.strip("\n") and pieces[1].startswith('doc = """'), pieces


def test_a_function_a_little_longer_than_a_page_stays_whole():
    whole = function("draw", 34)  # 37 lines: longer than 34, within 15% more
    pieces = split_code(whole + "\ndraw()\nprint('drawn')\n", max_lines=34, stretch_lines=int(34 * CODE_STRETCH))
    assert pieces[0] == whole.strip("\n"), "the function is cut inside though it nearly fits"
    assert split_code(function("draw", 60), max_lines=34, stretch_lines=39)[0].startswith("def draw"), \
        "a function far longer than a page is still cut"


def test_a_tall_section_continues_on_subslides_that_each_fit():
    nb = tall_section()
    assert max(section_heights(nb)) > 2 * BUDGET
    fitted = fit_slides(nb)
    kinds = [cell.metadata["slideshow"]["slide_type"] for cell in fitted.cells]
    assert kinds[0] == "slide" and kinds.count("subslide") >= 2 and kinds[-1] == "slide", kinds
    assert max(section_heights(fitted)) <= BUDGET * CODE_STRETCH, section_heights(fitted)
    code = [cell for cell in fitted.cells if cell.cell_type == "code"]
    shown = "\n".join(cell.source for cell in code)
    assert code_lines(shown) == code_lines(nb.cells[1].source), "every line of code, in order"
    assert [out.output_type for cell in code for out in cell.outputs] == ["display_data", "stream"]
    assert all(cell.metadata.get("transient", {}).get("remove_source") for cell in code if not cell.source)
    assert "assert forward()" not in shown, "skipped cells (hidden tests) are left out"
    assert len({cell.id for cell in fitted.cells}) == len(fitted.cells), "continuation cells need ids of their own"


def test_a_section_that_fits_is_left_as_it_is():
    nb = tall_section()
    nb.cells = [nb.cells[3]]
    assert fit_slides(nb).cells == nb.cells


def test_the_instructor_splits_a_cell_into_pieces_of_their_own():
    cell = slide(nbformat.v4.new_code_cell(function("a", 8) + "\n" + function("b", 8)), "slide")
    cell.metadata["dlkit"] = {"slides": {"split_lines": 12}}
    fitted = fit_slides(nbformat.v4.new_notebook(cells=[cell]))
    assert [c.metadata["slideshow"]["slide_type"] for c in fitted.cells] == ["slide", "subslide"]
    assert [c.source.splitlines()[0] for c in fitted.cells] == ["def a():", "def b():"]


def test_the_instructor_scales_a_cell_and_the_template_draws_it_smaller():
    cell = slide(nbformat.v4.new_markdown_cell("## A table\n\n| a | b |\n|---|---|\n| 1 | 2 |"), "slide")
    cell.metadata["dlkit"] = {"slides": {"scale": 0.8}}
    nb = nbformat.v4.new_notebook(cells=[cell])
    assert estimated_height(cell) < 0.81 * estimated_height(nbformat.v4.new_markdown_cell(cell.source))
    assert 'style="zoom: 0.8"' in export_slides(fit_slides(nb))


def test_a_code_line_too_long_for_its_box_scales_its_cell_to_fit():
    wide = slide(nbformat.v4.new_code_cell("x = 1  # " + "w" * (2 * CODE_WIDTH)), "slide")
    fitted = fit_slides(nbformat.v4.new_notebook(cells=[wide]))
    scale = fitted.cells[0].metadata["dlkit"]["slides"]["scale"]
    assert scale * len(wide.source) <= CODE_WIDTH and scale > 0.45
    assert "dlkit" not in wide.metadata, "the source notebook is left unchanged"


def test_code_lines_per_page_fill_the_budget():
    lines = code_lines_per_page()
    code = nbformat.v4.new_code_cell("\n".join(["x = 1"] * lines))
    assert estimated_height(code) <= BUDGET < estimated_height(nbformat.v4.new_code_cell(code.source + "\nx = 2"))


@pytest.mark.parametrize("name", list(assignments()))
def test_every_slide_of_the_committed_notebooks_fits_before_their_outputs(name):
    """The sources have no outputs (they are committed cleared), so this checks the text and the code alone."""
    nb = nbformat.read(assignments()[name], as_version=4)
    mark_slides(nb)
    heights = section_heights(fit_slides(nb))
    assert max(heights) <= BUDGET * CODE_STRETCH, f"{name}: a slide estimated at {max(heights):.0f}"
