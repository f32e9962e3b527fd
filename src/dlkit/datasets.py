"""Find the small datasets shipped with the kit (the repository's data/ folder, installed as dlkit.data)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def data_file(name: str) -> Path:
    """Path of a dataset file shipped with dlkit; FileNotFoundError lists what is shipped."""
    folder = files("dlkit.data")
    path = folder / name
    if not path.is_file():
        shipped = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.name.startswith("__"))
        raise FileNotFoundError(f"dlkit ships no dataset file {name!r}; it has {shipped}")
    return Path(str(path))
