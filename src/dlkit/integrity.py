"""Undo a submission's monkey-patching of what the tests rely on, before each test cell runs.

While grading, the kit runs `snapshot()` in a cell it puts before all student code and
`restore()` at the top of every test cell. A student cell that rebinds `np.allclose`,
`torch.testing.assert_close`, `dlkit.assert_close`, `math.isclose`, a builtin, or IPython's
exception display can therefore not make a wrong answer pass.

This raises the bar; it is not a sandbox. Code in the same process can in principle defeat
any in-process check, which is why the grader also runs each submission in its own process
under OS limits, and keeps each executed notebook for a TA to read.
"""

from __future__ import annotations

import importlib
import sys

# What tests compare with, check with, or raise through.
GUARDED = {
    "builtins": ["abs", "all", "any", "isinstance", "len", "max", "min", "sum", "type", "float", "int", "print",
                 "round", "sorted", "AssertionError"],
    "math": ["isclose", "isfinite", "isnan"],
    "numpy": ["allclose", "isclose", "array_equal", "all", "any", "abs", "max", "isfinite", "asarray"],
    "numpy.testing": ["assert_allclose", "assert_array_equal", "assert_equal", "assert_array_almost_equal"],
    "torch": ["allclose", "isclose", "equal", "all", "any", "abs", "max", "isfinite"],
    "torch.testing": ["assert_close"],
    "dlkit": ["assert_close", "assert_same_placement", "rel_error", "to_numpy", "tolerances_for", "test_devices",
              "as_torch_device", "check_on_devices", "SkipDevice", "has_float64"],
    "dlkit.devices": ["as_torch_device", "explicit_devices", "has_float64", "test_devices", "tf_kinds_present",
                      "torch_devices"],
    "dlkit.ondevice": ["check_on_devices", "_absence", "_describe", "_emit", "_kinds_to_visit", "_placement",
                       "explicit_devices", "tf_kinds_present", "torch_devices"],
    "json": ["dumps"],
    "dlkit.checks": ["assert_close", "assert_same_placement", "rel_error", "tolerances_for", "to_numpy"],
    "dlkit.convert": ["to_numpy"],
}
# IPython methods whose replacement could hide a test's exception.
SHELL_METHODS = ["showtraceback", "_showtraceback", "showsyntaxerror", "run_cell", "run_cell_async",
                 "run_ast_nodes", "run_code", "set_custom_exc"]

_originals: dict[tuple[str, str], object] = {}
_shell_originals: dict[tuple[type, str], object] = {}


def snapshot() -> None:
    """Remember the guarded functions as they are now, before any student code has run."""
    for module_name, names in GUARDED.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # e.g. no torch in this runtime
            continue
        for name in names:
            if hasattr(module, name):
                _originals[(module_name, name)] = getattr(module, name)
    shell = _shell()
    if shell is not None:
        for cls in type(shell).__mro__:
            for name in SHELL_METHODS:
                if name in vars(cls):
                    _shell_originals[(cls, name)] = vars(cls)[name]


def restore() -> list[str]:
    """Put back every guarded function a submission replaced; return what had been tampered with."""
    changed = []
    for (module_name, name), original in _originals.items():
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, name, None) is not original:
            setattr(module, name, original)
            changed.append(f"{module_name}.{name}")
    shell = _shell()
    if shell is not None:
        for (cls, name), original in _shell_originals.items():
            if vars(cls).get(name) is not original:
                setattr(cls, name, original)
                changed.append(f"{cls.__name__}.{name}")
        for name in SHELL_METHODS:
            if name in vars(shell):  # an instance attribute shadows the class's method
                delattr(shell, name)
                changed.append(f"get_ipython().{name}")
        if shell.custom_exceptions:
            shell.set_custom_exc((), None)
            changed.append("get_ipython().set_custom_exc")
    if sys.excepthook is not sys.__excepthook__:
        sys.excepthook = sys.__excepthook__
    return changed


def _shell():
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None
