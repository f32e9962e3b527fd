"""Comparisons whose failure messages tell a student where, and by how much, they are off.

Hidden and visible tests use these instead of bare `assert`, so a failing test reads like
"pairwise_sq_dists is off at [2, 0]: got -1.2e-06, expected 0 ..." rather than "AssertionError".
"""

from __future__ import annotations

import numpy as np

from .convert import to_numpy

# (rtol, atol) by the precision of the value checked: loose enough for a correct answer
# computed in a different order on another device, tight enough to catch real mistakes.
_TOLERANCES = {
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "float32": (1e-4, 1e-5),
    "float64": (1e-7, 1e-9),
}


def tolerances_for(dtype) -> tuple[float, float]:
    """The default (rtol, atol) for a dtype given as a torch, TF or NumPy dtype or its name."""
    name = str(getattr(dtype, "name", dtype)).replace("torch.", "")
    return _TOLERANCES.get(name, _TOLERANCES["float64"])


def rel_error(x, y) -> float:
    """Largest elementwise relative error, |x - y| / max(1e-8, |x| + |y|), as in gradient checks."""
    a = to_numpy(x).astype(np.float64)
    b = to_numpy(y).astype(np.float64)
    if a.size == 0 and b.size == 0:
        return 0.0
    return float(np.max(np.abs(a - b) / np.maximum(1e-8, np.abs(a) + np.abs(b))))


def _dtype_of(value):
    return value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype


def assert_close(actual, expected, *, rtol: float | None = None, atol: float | None = None,
                 name: str = "result") -> None:
    """Raise AssertionError naming the worst element when `actual` is not close to `expected`.

    Tolerances default to those of `expected`'s dtype. Shapes must match exactly: silently
    broadcasting a (n, 1) answer against (n,) is a bug we want students to see.
    """
    if actual is None:
        raise AssertionError(f"{name} is None: did the function forget to return its result?")
    default_rtol, default_atol = tolerances_for(_dtype_of(expected))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    got = to_numpy(actual).astype(np.float64)
    want = to_numpy(expected).astype(np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"{name} has shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    if not np.isfinite(got).all() and np.isfinite(want).all():
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(got))[0])
        raise AssertionError(f"{name} has a non-finite value {got[where]} at index {list(where)}; "
                             f"expected {want[where]:.6g} (overflow or division by zero?)")
    err = np.abs(got - want)
    allowed = atol + rtol * np.abs(want)
    bad = err > allowed
    if not bad.any():
        return
    worst = np.unravel_index(int(np.argmax(np.where(bad, err - allowed, -np.inf))), got.shape)
    where = f" at index {[int(i) for i in worst]}" if got.ndim else ""
    raise AssertionError(
        f"{name} is off{where}: got {got[worst]:.6g}, expected {want[worst]:.6g} "
        f"(|error| {err[worst]:.3g} > allowed {allowed[worst]:.3g} = atol {atol:g} + rtol {rtol:g}*|expected|); "
        f"{int(bad.sum())} of {bad.size} values out of tolerance, max relative error {rel_error(got, want):.3g}"
    )


def assert_same_placement(actual, like, *, name: str = "result") -> None:
    """Raise AssertionError unless `actual` is a tensor on the same device and of the same dtype as `like`.

    This is what catches a hidden `.cpu()`, a tensor created without `device=`, or a float64
    constant that silently upcasts a float32 computation.
    """
    for attr in ("device", "dtype"):
        want = getattr(like, attr, None)
        got = getattr(actual, attr, None)
        if want is not None and got != want:
            raise AssertionError(f"{name} has {attr} {got}, but the inputs had {attr} {want}: "
                                 f"results must stay on the inputs' {attr}")


def assert_no_float64(fn, *args, name: str = "the function") -> object:
    """Call `fn(*args)` on tensors without float64 and fail if any operation it ran made a float64 tensor.

    A TPU or an Apple GPU has no float64, and a consumer GPU computes it many times slower, so
    code that keeps "the inputs' dtype" must not compute in float64 on the way (a `.double()`, a
    float64 constant) even when it casts back at the end. That is invisible in the result on a CPU
    or a CUDA GPU, so the operations are watched as they run: the same verdict on every machine.
    Returns what `fn` returned.
    """
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    made: list[str] = []

    class WatchFloat64(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if any(isinstance(t, torch.Tensor) and t.dtype == torch.float64 for t in tree_flatten(out)[0]):
                made.append(func.overloadpacket.__name__)
            return out

    with WatchFloat64():
        result = fn(*args)
    if made:
        raise AssertionError(f"{name} computes in float64 (operations {', '.join(dict.fromkeys(made))}) on float32 "
                             "inputs: keep the inputs' dtype throughout; TPUs and Apple GPUs have no float64")
    return result


def dispatched_ops(fn, *args) -> tuple[object, int]:
    """Call `fn(*args)` and count the torch operations it ran: (its result, how many).

    What a vectorisation exercise leaves behind: a vectorised function runs the same few operations
    whatever the size of its input, while a Python-level loop (`for`, a comprehension, `map`,
    recursion) runs some per element. Counted as they run, not read from the source.
    """
    from torch.utils._python_dispatch import TorchDispatchMode

    count = 0

    class CountOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            nonlocal count
            count += 1
            return func(*args, **(kwargs or {}))

    with CountOps():
        result = fn(*args)
    return result, count


def called_functions(fn, *args) -> tuple[object, set[str]]:
    """Call `fn(*args)` and name the torch functions it called: (its result, their names, e.g. {"sigmoid", "exp"}).

    What an exercise that rules out a built-in ("write the stable formula, not torch.sigmoid") leaves behind,
    seen as the code runs (a TorchFunctionMode), never read from its text: an alias or a detour is seen too.
    """
    from torch.overrides import TorchFunctionMode

    names: set[str] = set()

    class RecordCalls(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            names.add(getattr(func, "__name__", str(func)))
            return func(*args, **(kwargs or {}))

    with RecordCalls():
        result = fn(*args)
    return result, names


def in_kernel(fn):
    """Mark a hidden test's helper that must run where the student's code runs (building their model, training it).

    In the grader's judge (autograder/judge/) the marked function is sent to the student's kernel and runs there
    on the arguments it is given (plain data), with the notebook's names in reach; it must return plain data
    (numbers, strings, lists, dicts, arrays, tensors), which the test then checks in the judge. It sees no
    variable of the test's other than its arguments. Anywhere else (a student running the notebook) it is the
    function itself, unchanged.
    """
    return fn
