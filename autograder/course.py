"""What the course is: which assignments exist, what their notebooks import, the name of a graded cell, and the
nbgrader config for a folder."""

from __future__ import annotations

import ast
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from autograder.isolation.limits import Limits
from autograder.paths import CONFIG_FILE, NOTEBOOKS


@contextmanager
def nbgrader_tools_on_path() -> Iterator[None]:
    """This interpreter's bin folder first on PATH while the block runs.

    nbgrader runs the `alembic` command from PATH when it creates a gradebook, so
    `.venv/bin/python -m autograder.authoring.release` must work without the virtual environment activated.
    """
    before = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + before
    try:
        yield
    finally:
        os.environ["PATH"] = before


def assignments() -> dict[str, Path]:
    """Instructor source notebook of each assignment, keyed by the notebook's stem (01_tensors, ...)."""
    return {path.stem: path for path in sorted(NOTEBOOKS.glob("*.ipynb"))}


def grade_id_of(cell: nbformat.NotebookNode) -> str | None:
    """The cell's nbgrader grade_id; None for a cell nbgrader does not track. nbgrader.utils tells a cell's
    kind (is_grade, is_solution, is_locked) but has no reader for its name."""
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def notebook_imports(nb: nbformat.NotebookNode) -> list[str]:
    """The modules a notebook's code cells import at top level (`import a.b`, `from a.b import c`), in order."""
    found: list[str] = []
    for cell in nb.cells:
        if cell.cell_type != "code" or "import" not in cell.source:  # most cells: no need to parse them
            continue
        source = "\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!")))
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                found.extend(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append(node.module)
    return list(dict.fromkeys(found))


#: What libraries import on first use rather than when imported: (library the notebook imports, what in
#: its code reaches the lazy import, the modules imported then). Measured in a kernel that had already
#: imported the notebooks' modules: torch._dynamo (1.4 s) is reached from many places (an optimizer's first
#: step, a TorchDispatchMode: 01's reference run loads it), so it comes with torch; torch.compile,
#: torch.export and the ONNX exporter import Inductor's lowerings (1.2 s), which a zygote for 01 alone
#: would load for nothing; torch.onnx's exporter imports onnxscript. A pattern that misses costs time,
#: never a grade: the kernel imports what it needs itself.
ON_FIRST_USE = (
    ("torch", r"", ("torch._dynamo",)),
    ("torch", r"torch\.compile|torch\.export|\bonnx\b", ("torch._inductor.compile_fx",)),
    ("onnx", r"", ("torch.onnx._internal.exporter._core", "onnxscript")),
)


def first_use_modules(nb: nbformat.NotebookNode, imported: list[str] | None = None) -> list[str]:
    """The modules the notebook's code will import on first use of what it imports (ON_FIRST_USE); `imported`,
    where the caller has it already, is notebook_imports(nb)."""
    imported = notebook_imports(nb) if imported is None else imported
    code = "\n".join(cell.source for cell in nb.cells if cell.cell_type == "code")
    return [name for library, reached_by, names in ON_FIRST_USE
            if library in imported and re.search(reached_by, code) for name in names]


def select(names: list[str] | None = None) -> dict[str, Path]:
    """Instructor source of each named assignment (all when none are named); ValueError names unknown ones."""
    sources = assignments()
    unknown = sorted(set(names or []) - set(sources))
    if unknown:
        raise ValueError(f"no instructor notebook for {unknown}; known assignments: {sorted(sources)}")
    return {name: sources[name] for name in names} if names else sources


def nbgrader_config(root: Path, limits: Limits | None = None) -> Config:
    """The kit's nbgrader config with its course directory and gradebook under `root`, and `limits` if given."""
    config = PyFileConfigLoader(CONFIG_FILE.name, path=str(CONFIG_FILE.parent)).load_config()
    config.CourseDirectory.root = str(root)
    config.CourseDirectory.db_url = f"sqlite:///{root / 'gradebook.db'}"
    if limits is not None:
        config.merge(limits.nbgrader_config())
    return config
