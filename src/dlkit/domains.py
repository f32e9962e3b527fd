"""The inputs an exercise's text allows, as data a hidden test draws from: its edges first, then random members.

A test that draws only typical inputs (two to five rows, every axis non-empty, memory in row order)
passes answers that break at the edges the text allows: "an array of any shape" includes a 0-d
array and an empty one, and "a tensor" includes a transposed or strided view of another. Each
function here takes the test's random generator (drawn from the grader's seed, so a regrade draws
the same) and returns the domain's edges, which every student's test meets, followed by random
members, which differ from student to student.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def array_shapes(rng: np.random.Generator, *, max_ndim: int = 3, max_side: int = 5, random: int = 3,
                 zero_d: bool = True, empty: bool = True) -> list[tuple[int, ...]]:
    """Shapes of "an array of any shape": 0-d, one element, a column of ones, an empty axis first and an
    empty axis last (each edge only where the text allows it: `zero_d`, `empty`), then `random` shapes of
    1 to `max_ndim` axes of 1 to `max_side` entries."""
    side = lambda: int(rng.integers(2, max_side + 1))  # noqa: E731
    edges: list[tuple[int, ...]] = [()] if zero_d else []
    edges += [(1,), (side(), 1)]
    if empty:
        edges += [(0,), (side(), 0)]
    drawn = [tuple(int(s) for s in rng.integers(1, max_side + 1, size=int(rng.integers(1, max_ndim + 1))))
             for _ in range(random)]
    return edges + drawn


def layouts(array: Any) -> list[tuple[str, Any]]:
    """`array` (NumPy or torch) and views of other arrays with the same values, dtype and device, as a function
    that accepts "an array" must take them: (what it is, the array) for the array itself, a transposed view
    (not contiguous, where it has 2 or more axes) and a strided view (every other entry along each axis of a
    larger array, where it has 1 or more axes). A function that reads a view's memory as if it were contiguous,
    or writes into a copy of it, gets the wrong values or leaves the view unchanged."""
    found = [("the array itself", array)]
    if array.ndim >= 2:
        found.append(("a transposed view (not contiguous)", _transposed_view(array)))
    if array.ndim >= 1:
        found.append(("a strided view (every other entry of a larger array)", _strided_view(array)))
    return found


def _transposed_view(array: Any) -> Any:
    if isinstance(array, np.ndarray):
        return np.ascontiguousarray(np.swapaxes(array, -1, -2)).swapaxes(-1, -2)
    return _as_leaf_like(array, array.detach().transpose(-1, -2).contiguous().transpose(-1, -2))


def _strided_view(array: Any) -> Any:
    """Every other entry along each axis of an array twice as large: no two axes can be merged into one."""
    every_other = tuple(slice(None, None, 2) for _ in array.shape)
    larger = tuple(2 * side for side in array.shape)
    if isinstance(array, np.ndarray):
        base = np.zeros(larger, dtype=array.dtype)
        base[every_other] = array
        return base[every_other]
    base = array.detach().new_zeros(larger)
    base[every_other] = array.detach()
    return _as_leaf_like(array, base[every_other])


def _as_leaf_like(array: Any, view: Any) -> Any:
    """The view (of memory that does not require grad) requiring grad where `array` does: a leaf of its own."""
    return view.requires_grad_() if array.requires_grad else view
