"""Fit every slide of a deck into reveal.js's frame, before the deck is written.

A slide is a section of the notebook (the cells from one `slide`/`subslide` cut to the next), and a
section often holds more than a projector shows: a page of explanation, a 60-line cell, its plot.
`fit_slides` estimates each cell's height in the frame's units and, where a slide would be taller
than the frame, moves what does not fit onto continuation sub-slides (down arrow): markdown at its
paragraphs, a code cell's input at its statements (a whole function where one fits), each output on
its own if need be. The instructor's metadata on a cell overrides the rules:

    "dlkit": {"slides": {"split_lines": 25}}   this code cell's input in pieces of at most 25 lines
    "dlkit": {"slides": {"scale": 0.8}}        this cell drawn at 80% (the template's CSS zoom), kept whole

A code line longer than the input box is wide would be cut off at its right edge, so such a cell is
scaled down until its longest line fits (`fit_width`).

The frame is 16:9, as projectors are, and wide enough for about 126 characters of code. The heights
were measured in Chromium on the eight decks (the fonts nbconvert's reveal template sets): a code
line is 22.8 units whatever its length (code does not wrap), a line of text 26, an image its own
height up to the width it may take. They are estimates (markdown wraps by words, MathJax sizes
formulas), so pages are filled to BUDGET, a margin below the frame, and the template shrinks
whatever still overflows; `autograder/verify/slide_fit.py` measures the result in Chromium.
"""

from __future__ import annotations

import base64
import io
import itertools
import math
import re
import struct
import textwrap
import tokenize
from collections import Counter
from dataclasses import dataclass, field

import nbformat

FRAME_WIDTH = 1600
FRAME_HEIGHT = 900
#: How full a page is filled: the rest of the frame absorbs the estimates' errors.
BUDGET = 0.92 * FRAME_HEIGHT
#: A piece of a split code cell is at least this share of a page, so no slide holds two stray lines.
MIN_CHUNK_SHARE = 0.3
#: What a page break inside a cell (between paragraphs, statements, an input and its output) costs,
#: against the squared share of a page each page leaves empty: cuts between cells come first.
CUT_IN_CELL = 0.25
#: A cut in code cheaper than this is between top-level statements (code_cut_costs).
TOP_LEVEL = 1.0
#: A top-level statement up to this many pages long stays whole (the template shrinks its page, to 0.9 at worst).
CODE_STRETCH = 1.15

# Heights in the frame's units (see the module's docstring).
CODE_LINE = 22.8            # a line of code, in a cell's input or a text output
CODE_INPUT_PAD = 22.2       # a code cell's input box beyond its lines
CODE_CELL_PAD = 10.0        # a code cell beyond its input and outputs
CODE_WIDTH = 126            # characters of a code line the input box shows (it cuts longer lines off)
OUTPUT_AREA_PAD = 5.0       # the output area, when there are outputs
STREAM_PAD = 15.0           # one printed output beyond its lines
OUTPUT_WRAP = 110           # characters of printed output per line before it wraps
IMAGE_PAD = 55.0            # an image output beyond the image
IMAGE_MAX_WIDTH = 1380.0    # an image wider than this is drawn scaled down to it
MARKDOWN_CELL_PAD = 30.0    # a markdown cell beyond its blocks
BLOCK_GAP = 20.0            # the margin between two blocks (paragraphs, lists, headings, formulas)
TEXT_LINE = 26.0            # a wrapped line of a paragraph
LIST_LINE = 32.0            # a wrapped line of a list item
TEXT_WRAP = 128             # characters of text per line (markup not counted)
HEADING_LINE = {1: 60.0, 2: 40.0, 3: 31.0}  # a heading's line, by level
HEADING_WRAP = {1: 60, 2: 90, 3: 105}        # characters of a heading per line (the theme sets them uppercase)
TABLE_LINE = 26.0           # a wrapped line of a table row
TABLE_WRAP = 100            # characters of a table row per line (tables do not take the slide's full width)
TABLE_ROW_PAD = 8.0
MATH_LINE = 55.0            # a display formula
MATH_TALL = 25.0            # ... with a fraction or a sum's limits
MATRIX_ROW = 30.0           # ... per row of its tallest matrix beyond the first

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s")
MARKUP = re.compile(r"\*\*|__|`|\$|\\|^\s*([*+-]|\d+[.)])\s+|^#+\s+")
LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
TABLE_RULE = re.compile(r"^\s*\|[\s:|-]+\|\s*$")
LIST_ITEM = re.compile(r"^\s*([*+-]|\d+[.)])\s")


@dataclass
class Piece:
    """A part of a cell that may go on a page of its own: markdown paragraphs, lines of code, one output."""

    cell: int                    # index of its cell in the notebook
    height: float
    source: str = ""             # markdown text or code lines
    outputs: list[nbformat.NotebookNode] = field(default_factory=list)
    starts_page: bool = False    # a piece of code the instructor split off (`split_lines`)


def slides_metadata(cell: nbformat.NotebookNode) -> dict:
    """The instructor's slide settings for this cell (`"dlkit": {"slides": {...}}`), or {}."""
    return cell.metadata.get("dlkit", {}).get("slides", {})


def cell_scale(cell: nbformat.NotebookNode) -> float:
    return float(slides_metadata(cell).get("scale", 1.0))


# Markdown

def markdown_blocks(source: str) -> list[list[str]]:
    """The markdown's blocks (paragraphs, lists, headings, fenced code, display math), in groups kept on one page.

    Blocks are separated by blank lines, except inside a fence or a `$$` formula; a heading is
    grouped with the block after it, so that no page ends on a heading.
    """
    blocks, current, fenced, in_math = [], [], False, False
    for line in source.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and line.count("$$") % 2:
            in_math = not in_math
        if not line.strip() and not fenced and not in_math:
            if current:
                blocks.append("\n".join(current))
            current = []
        else:
            current.append(line)
    if current:
        blocks.append("\n".join(current))
    return keep_headings_with_text(blocks)


def keep_headings_with_text(blocks: list[str]) -> list[list[str]]:
    groups: list[list[str]] = []
    for block in blocks:
        if groups and is_heading(groups[-1][-1]):
            groups[-1].append(block)
        else:
            groups.append([block])
    return groups


def is_heading(block: str) -> bool:
    return "\n" not in block and bool(HEADING.match(block))


def wrapped_lines(text: str, width: float) -> int:
    """How many lines `text` takes at `width` characters a line, broken at words as a browser does."""
    return max(1, len(textwrap.wrap(text, max(int(width), 1), break_long_words=False)))


def shown_text(markdown: str) -> str:
    """The text a reader sees of some markdown, on one line: emphasis, backticks, link targets, list marks removed."""
    text = LINK.sub(r"\1", " ".join(line.strip() for line in markdown.splitlines()))
    return MARKUP.sub("", text)


def markdown_block_height(block: str, scale: float = 1.0) -> float:
    """The height of one markdown block and the gap after it, in the frame's units, drawn at `scale`."""
    lines = block.splitlines()
    if heading := HEADING.match(block):
        level = min(len(heading.group(1)), 3)
        height = HEADING_LINE[level] * wrapped_lines(shown_text(block), HEADING_WRAP[level] / scale)
    elif FENCE.match(lines[0]):
        height = CODE_LINE * max(len(lines) - 2, 1) + CODE_INPUT_PAD
    elif block.lstrip().startswith("$$"):
        height = formula_height(block)
    elif lines[0].lstrip().startswith("|"):
        height = table_height([row for row in lines if not TABLE_RULE.match(row)], TABLE_WRAP / scale)
    elif LIST_ITEM.match(lines[0]):
        height = LIST_LINE * sum(wrapped_lines(shown_text(item), TEXT_WRAP / scale) for item in list_items(lines))
    else:
        height = TEXT_LINE * wrapped_lines(shown_text(block), TEXT_WRAP / scale)
    return (height + BLOCK_GAP) * scale


def table_height(rows: list[str], width: float) -> float:
    """A table's rows, each as many lines as its text takes: the browser sizes columns by their content, which
    lies between equal columns (each cell wraps in its share) and one flowing line (the row's text at full width)."""
    cells = [[shown_text(cell) for cell in row.strip().strip("|").split("|")] for row in rows]
    height = 0.0
    for row in cells:
        in_columns = max(wrapped_lines(cell, width / len(row)) for cell in row)
        flowing = wrapped_lines(" ".join(row), width)
        height += TABLE_LINE * (in_columns + flowing) / 2 + TABLE_ROW_PAD
    return height


def formula_height(block: str) -> float:
    """A display formula: one line, taller with fractions or limits, taller still by its largest matrix's rows."""
    environments = re.findall(r"\\begin\{(\w+)\}(.*?)\\end\{\1\}", block, re.S)
    rows = max((body.count("\\\\") + 1 for _, body in environments), default=1)
    tall = bool(re.search(r"\\frac|\\sum_|\\prod_|\\int_", block))
    return MATH_LINE + MATH_TALL * tall + MATRIX_ROW * (rows - 1)


def list_items(lines: list[str]) -> list[str]:
    """A list's items as single lines of text (an item's continuation lines joined to it)."""
    items: list[str] = []
    for line in lines:
        if LIST_ITEM.match(line) or not items:
            items.append(line.strip())
        else:
            items[-1] += " " + line.strip()
    return items


# Code cells

def input_height(lines: int, scale: float = 1.0) -> float:
    return (CODE_LINE * lines + CODE_INPUT_PAD) * scale


def output_height(output: nbformat.NotebookNode, scale: float = 1.0) -> float:
    """The height of one output: printed text wraps at OUTPUT_WRAP characters, an image is its own height."""
    data = output.get("data", {})
    if "image/png" in data:
        width, height = png_size(data["image/png"], output.get("metadata", {}).get("image/png", {}))
        shrink = min(1.0, IMAGE_MAX_WIDTH / width) if width else 1.0
        return (height * shrink + IMAGE_PAD) * scale
    text = output.get("text", "") if output.get("output_type") == "stream" else data.get("text/plain", "")
    if output.get("output_type") == "error":
        text = "\n".join(output.get("traceback", []))
    lines = sum(wrapped_lines(line, OUTPUT_WRAP / scale) if line else 1 for line in text.rstrip("\n").split("\n"))
    return (CODE_LINE * lines + STREAM_PAD) * scale


def png_size(encoded: str, metadata: dict) -> tuple[float, float]:
    """An embedded PNG's displayed size: the metadata's width and height (retina figures), else its pixels."""
    if "width" in metadata and "height" in metadata:
        return float(metadata["width"]), float(metadata["height"])
    header = base64.b64decode(encoded[:44])
    width, height = struct.unpack(">II", header[16:24])
    return float(width), float(height)


def code_cut_costs(lines: list[str]) -> list[float]:
    """For each line, how badly cutting the cell just before it would break reading (inf: never).

    A cut costs the line's indentation: between two top-level statements is best, inside a function
    between its statements worse, within a statement (open brackets, a string, a decorator and its
    function, a backslash continuation) impossible. Cutting after a blank line costs a little less.
    """
    costs = [math.inf] * len(lines)
    starts = statement_starts(lines)
    for i, line in enumerate(lines):
        if i == 0 or not line.strip() or i not in starts:
            continue
        previous = lines[i - 1]
        if previous.lstrip().startswith("@"):
            continue
        costs[i] = len(line) - len(line.lstrip()) + (0.0 if not previous.strip() else 0.5)
    return costs


def statement_starts(lines: list[str]) -> set[int]:
    """The lines (0-based) at which a new logical line begins: not inside brackets, strings or continuations."""
    starts, depth, expect_start = set(), 0, True
    try:
        for token in tokenize.generate_tokens(io.StringIO("\n".join(lines) + "\n").readline):
            if token.type in (tokenize.NL, tokenize.NEWLINE):
                expect_start = depth == 0
            elif token.type == tokenize.OP and token.string in "([{":
                depth += 1
            elif token.type == tokenize.OP and token.string in ")]}":
                depth = max(depth - 1, 0)
            if expect_start and token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT):
                starts.add(token.start[0] - 1)
                expect_start = False
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return {i for i, line in enumerate(lines) if line.strip() and not line[0].isspace()}
    return starts


def split_code(source: str, max_lines: int, stretch_lines: int | None = None) -> list[str]:
    """The code in consecutive pieces of at most `max_lines` lines, each cut where it breaks reading least.

    A top-level statement (a function, a loop) a little longer than that, up to `stretch_lines`, is
    kept whole rather than cut inside: its page is then drawn a little smaller by the template.
    """
    lines = source.rstrip("\n").split("\n")
    costs = code_cut_costs(lines)
    shortest = max(1, int(max_lines * MIN_CHUNK_SHARE))
    pieces, start = [], 0
    while (cut := next_cut(costs, start, max_lines, stretch_lines or max_lines, shortest)) is not None:
        pieces.append("\n".join(lines[start:cut]))
        start = cut
    pieces.append("\n".join(lines[start:]))
    return [piece.strip("\n") for piece in pieces if piece.strip()]


def next_cut(costs: list[float], start: int, max_lines: int, stretch_lines: int, shortest: int) -> int | None:
    """Where the piece of code beginning at line `start` ends, or None where the rest is one piece.

    Between top-level statements within a page if possible (leaving neither piece shorter than
    `shortest`), else after a top-level statement that runs up to `stretch_lines` (then a short
    piece may follow), else wherever inside a statement costs least.
    """
    rest = len(costs) - start
    if rest <= max_lines:
        return None
    cut = cheapest_cut(costs, start + shortest, min(start + max_lines, len(costs) - shortest))
    if costs[cut] < TOP_LEVEL:
        return cut
    if rest <= stretch_lines:
        return None
    stretched = cheapest_cut(costs, start + shortest, start + stretch_lines)
    return stretched if costs[stretched] < TOP_LEVEL else cut


def cheapest_cut(costs: list[float], first: int, last: int) -> int:
    """The cheapest line to cut before, from `first` to `last`, the furthest of equals."""
    last = min(last, len(costs) - 1)
    return min(range(first, last + 1), key=lambda i: (costs[i], -i), default=last)


def code_lines_per_page(scale: float = 1.0) -> int:
    return max(1, int((BUDGET / scale - CODE_INPUT_PAD - CODE_CELL_PAD) / CODE_LINE))


def code_pieces(index: int, cell: nbformat.NotebookNode) -> list[Piece]:
    """A code cell as its input (in pieces, where it is longer than a page or the instructor says) and its outputs."""
    scale, settings = cell_scale(cell), slides_metadata(cell)
    if "split_lines" in settings:
        max_lines = stretch_lines = int(settings["split_lines"])
    else:
        max_lines = code_lines_per_page(scale)
        stretch_lines = int(max_lines * CODE_STRETCH)
    chunks = split_code(cell.source, max_lines, stretch_lines) if cell.source.strip() else []
    pieces = [Piece(index, input_height(len(chunk.splitlines()), scale) + CODE_CELL_PAD * scale, source=chunk,
                    starts_page=n > 0 and "split_lines" in settings) for n, chunk in enumerate(chunks)]
    pieces += [Piece(index, output_height(output, scale) + OUTPUT_AREA_PAD * scale, outputs=[output])
               for output in cell.get("outputs", [])]
    return pieces


def markdown_pieces(index: int, cell: nbformat.NotebookNode) -> list[Piece]:
    scale = cell_scale(cell)
    return [Piece(index, sum(markdown_block_height(block, scale) for block in group), source="\n\n".join(group))
            for group in markdown_blocks(cell.source)]


def cell_pieces(index: int, cell: nbformat.NotebookNode) -> list[Piece]:
    if cell.cell_type == "code":
        return code_pieces(index, cell)
    pieces = markdown_pieces(index, cell)
    if pieces:
        pieces[0].height += MARKDOWN_CELL_PAD * cell_scale(cell)
    return pieces


def estimated_height(cell: nbformat.NotebookNode) -> float:
    """The height of a cell on a slide, in the frame's units."""
    return sum(piece.height for piece in cell_pieces(0, cell))


# Pages

def slide_type(cell: nbformat.NotebookNode) -> str:
    return cell.metadata.get("slideshow", {}).get("slide_type", "-")


def sections(nb: nbformat.NotebookNode) -> list[list[int]]:
    """The indices of the cells shown, grouped by slide: a `slide` or `subslide` cut starts the next group."""
    groups: list[list[int]] = []
    for index, cell in enumerate(nb.cells):
        kind = slide_type(cell)
        if kind == "skip":
            continue
        if kind in ("slide", "subslide") or not groups:
            groups.append([])
        groups[-1].append(index)
    return groups


def must_split(cell: nbformat.NotebookNode) -> bool:
    return "split_lines" in slides_metadata(cell)


def page_starts(pieces: list[Piece]) -> list[int]:
    """Where the pages of one slide begin (indices into `pieces`, the first 0).

    As few pages of at most BUDGET as the pieces allow (a piece taller than that alone on its page),
    and among those the most even ones, cut between cells rather than inside one: a page that ends
    a few lines into the next would leave a widow slide. A piece the instructor split off
    (`split_lines`) starts a page. Dynamic programming over where the last page begins.
    """
    best: list[tuple[int, float, int]] = [(0, 0.0, 0)] + [(len(pieces) + 1, math.inf, 0)] * len(pieces)
    for end in range(1, len(pieces) + 1):
        height = 0.0
        for start in range(end - 1, -1, -1):
            height += pieces[start].height
            if start < end - 1 and (height > BUDGET or pieces[start + 1].starts_page):
                break
            count, badness, _ = best[start]
            slack = (BUDGET - height) / BUDGET
            best[end] = min(best[end], (count + 1, badness + slack * slack + cut_penalty(pieces, start), start))
    starts, end = [], len(pieces)
    while end > 0:
        end = best[end][2]
        starts.append(end)
    return starts[::-1]


def cut_penalty(pieces: list[Piece], start: int) -> float:
    """What a page break before pieces[start] costs: nothing between two cells, CUT_IN_CELL inside one."""
    return CUT_IN_CELL if start > 0 and pieces[start - 1].cell == pieces[start].cell else 0.0


def paginate(pieces: list[Piece]) -> list[list[Piece]]:
    starts = page_starts(pieces) + [len(pieces)]
    return [pieces[begin:end] for begin, end in zip(starts, starts[1:])]


def page_cells(page: list[Piece], nb: nbformat.NotebookNode, copies: Counter) -> list[nbformat.NotebookNode]:
    """The cells of one page: the pieces of each original cell on it put back together in a copy of that cell.

    A cell's first copy keeps its id and slide type, later ones (on continuation pages) get ids of
    their own; a code cell shown with none of its input keeps only its outputs.
    """
    cells = []
    for index, group in itertools.groupby(page, key=lambda piece: piece.cell):
        pieces = list(group)
        cell = nbformat.from_dict(nb.cells[index])
        if copies[index]:
            cell.id = f"{cell.id}-{copies[index]}"
            cell.metadata["slideshow"] = {"slide_type": "-"}
        copies[index] += 1
        joint = "\n\n" if cell.cell_type == "markdown" else "\n"
        cell.source = joint.join(piece.source for piece in pieces if piece.source)
        if cell.cell_type == "code":
            cell.outputs = [output for piece in pieces for output in piece.outputs]
            if not cell.source:
                cell.metadata.setdefault("transient", {})["remove_source"] = True
        cells.append(cell)
    return cells


def section_cells(group: list[int], nb: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    """One slide's cells as they go in the deck: unchanged where they fit, else spread over continuation pages."""
    original = [nb.cells[i] for i in group]
    if sum(map(estimated_height, original)) <= BUDGET and not any(map(must_split, original)):
        return original
    pieces = [piece for index in group for piece in cell_pieces(index, nb.cells[index])]
    copies: Counter = Counter()
    cells = []
    for number, page in enumerate(paginate(pieces)):
        shown = page_cells(page, nb, copies)
        if number:
            shown[0].metadata["slideshow"] = {"slide_type": "subslide"}
        cells += shown
    return cells


def fit_width(cell: nbformat.NotebookNode) -> None:
    """Scale a code cell whose longest line is wider than its input box (which would cut the line off) to fit."""
    if cell.cell_type != "code" or not cell.source:
        return
    longest = max(len(line) for line in cell.source.expandtabs(4).splitlines())
    if longest * cell_scale(cell) > CODE_WIDTH:
        scale = math.floor(100 * CODE_WIDTH / longest) / 100
        cell.metadata.setdefault("dlkit", {}).setdefault("slides", {})["scale"] = scale


def fit_slides(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of an executed, marked notebook whose every slide fits the frame (as estimated), skipped cells left out.

    Code cells with lines too long for their box are scaled first, so that the heights account for it.
    """
    fitted = nbformat.from_dict(nb)
    for cell in fitted.cells:
        fit_width(cell)
    fitted.cells = [cell for group in sections(fitted) for cell in section_cells(group, fitted)]
    return fitted
