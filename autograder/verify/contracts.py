"""`make contracts [NOTEBOOK=..]`: does each exercise's hidden tests reach every edge of the domain its text allows?

Each exercise's contract is data, in autograder/contracts/<notebook>.toml, beside its text:

    [to_numpy]
    text = "to_numpy(t): any tensor (any shape and dtype, on any device, requiring grad or not) ..."
    "to_numpy(t)" = ["0-d", "empty", "float64", "int32", "non-contiguous", "requires grad", "accelerator"]
    "to_numpy()" = ["second call"]

A key `function(argument)` lists the edges that argument's values must reach among the calls the
exercise's hidden tests make; `function()` lists edges of the calls themselves; `Class.method(arg)`
names a method. The edges are the vocabulary of `_argument_edge` and `_CALL_EDGES` below (a dtype's
name, "0-d", "empty", "1 axis", "max|x| >= 1000", "nan", "instance of Module", "second call", ...), so
a contract cannot name an edge nobody checks.

How it is checked: the reference notebook runs in one IPython shell in this process (as `make
mutation` runs it), every function and method the exercise's solution cell defines is wrapped by a
recorder that describes each call's arguments (type, dtype, shape, layout, device, and what the
values hold), then the exercise's test cells run on the devices default grading visits, on a seed
drawn as the grader draws one. An edge no recorded call reaches is a gap: a student's answer that
breaks there would keep its points. Exit status 1 on any gap, unknown edge or function never called.

What every call's effects are compared with is not listed per exercise, because the judge checks it
for every call of every test (autograder/judge, src/dlkit/agent.py): arguments changed in place,
global state left behind (default dtype, grad mode, process groups, reseeded generators, TensorFlow's
eager mode and default graph). Returned type, dtype, shape and device are asserted by each test.
"""

from __future__ import annotations

import argparse
import ast
import functools
import inspect
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import tomllib
from nbgrader.utils import is_solution

from autograder.course import assignments, grade_id_of
from autograder.options import grading_devices
from autograder.paths import AUTOGRADER, BUILD
from autograder.verify.mutation import REFERENCE_CELL_SECONDS, each_alone, exercise_tests, reference_shell, run_cell

CONTRACTS = AUTOGRADER / "contracts"
_KEY = re.compile(r"^(?P<call>[A-Za-z_][\w.]*)\((?P<arg>\w*)\)$")
_MAGNITUDE = re.compile(r"^max\|x\| >= (?P<bound>[0-9.e+-]+)$")
_TINY = re.compile(r"^min\|x\| <= (?P<bound>[0-9.e+-]+)$")


@dataclass
class Value:
    """What one argument of one call was: enough to say which edges of a domain it reached."""

    kind: str  # "torch", "numpy", "tensorflow", "int", "float", "bool", "sequence", or the type's name
    dtype: str = ""
    shape: tuple[int, ...] | None = None
    contiguous: bool = True
    accelerator: bool = False
    requires_grad: bool = False
    nan: bool = False
    inf: bool = False
    zero: bool = False
    negative: bool = False
    ties: bool = False
    max_abs: float = 0.0
    min_abs: float = float("inf")  # the smallest nonzero magnitude
    classes: tuple[str, ...] = ()  # the names of its type and the type's bases (a model, a loader, a device)
    training: bool | None = None  # a module's mode: dropout and batch norm behave differently in each


def _numeric_facts(value: Value, data: np.ndarray) -> None:
    """Fill in what the values hold (NaN, inf, zeros, negatives, tied maxima, magnitudes) from a host copy."""
    if data.dtype == bool or data.size == 0 or not np.issubdtype(data.dtype, np.number):
        value.zero = bool(data.size) and data.dtype == bool and not data.all()
        return
    if np.issubdtype(data.dtype, np.complexfloating):
        data = np.abs(data)
    finite = np.isfinite(data) if np.issubdtype(data.dtype, np.floating) else np.ones(data.shape, bool)
    value.nan, value.inf = bool(np.isnan(data[~finite]).any()), bool(np.isinf(data[~finite]).any())
    value.zero, value.negative = bool((data == 0).any()), bool((data < 0).any())
    magnitudes = np.abs(data[finite].astype(np.float64))
    if magnitudes.size:
        value.max_abs = float(magnitudes.max())
        nonzero = magnitudes[magnitudes > 0]
        value.min_abs = float(nonzero.min()) if nonzero.size else value.min_abs
    if data.ndim >= 1 and data.shape[-1] >= 2 and finite.all():
        value.ties = bool(((data == data.max(axis=-1, keepdims=True)).sum(axis=-1) >= 2).any())


def _torch_value(tensor: Any) -> Value:
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    from dlkit import fakegpu

    value = Value("torch", str(tensor.dtype).removeprefix("torch."), tuple(int(n) for n in tensor.shape),
                  accelerator=isinstance(tensor, fakegpu.FakeGpuTensor) or tensor.device.type not in ("cpu", "meta"),
                  requires_grad=bool(tensor.requires_grad))
    if type(tensor) not in (torch.Tensor, torch.nn.Parameter, fakegpu.FakeGpuTensor):
        return value  # a tracer's stand-in (torch.export's fake tensors): it has no values to read
    # Outside the test's own watchers: describing a value must not count as one of the student's operations.
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        data = fakegpu._unwrapped(tensor).detach()
        value.contiguous = bool(data.is_contiguous())
        if data.device.type == "meta":
            return value
        data = data.cpu()
        _numeric_facts(value, (data.float() if data.dtype == torch.bfloat16 else data).resolve_conj().numpy())
    return value


def _tensorflow_value(tensor: Any) -> Value:
    device = getattr(tensor, "device", "") or ""
    value = Value("tensorflow", tensor.dtype.name, tuple(tensor.shape) if tensor.shape.rank is not None else None,
                  accelerator="GPU" in device or "TPU" in device)
    try:
        _numeric_facts(value, np.asarray(tensor.numpy()))
    except (AttributeError, NotImplementedError, TypeError, ValueError):  # a graph's symbolic tensor: no values
        pass
    return value


def describe(obj: Any) -> Value:
    """The Value of one argument: arrays and tensors of NumPy, torch and TensorFlow, Python numbers, sequences,
    and for anything the class names it is an instance of."""
    value = _describe(obj)
    value.classes = tuple(cls.__name__ for cls in type(obj).__mro__)
    training = getattr(obj, "training", None) if "Module" in value.classes else None
    value.training = training if isinstance(training, bool) else None
    return value


def _describe(obj: Any) -> Value:
    module = type(obj).__module__ or ""
    if isinstance(obj, np.ndarray) or isinstance(obj, np.generic):
        data = np.asarray(obj)
        value = Value("numpy", data.dtype.name, data.shape, contiguous=bool(data.flags.c_contiguous))
        _numeric_facts(value, data)
        return value
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _torch_value(obj)
    if module.startswith("tensorflow") and hasattr(obj, "dtype") and hasattr(obj, "shape"):
        return _tensorflow_value(obj)
    if isinstance(obj, bool):
        return Value("bool", "bool", (), zero=not obj)
    if isinstance(obj, (int, float)):
        value = Value(type(obj).__name__, type(obj).__name__, ())
        _numeric_facts(value, np.asarray(obj))
        return value
    if isinstance(obj, (list, tuple)):
        return Value("sequence", "", (len(obj),))
    return Value(type(obj).__name__)


def _numel(value: Value) -> int | None:
    return None if value.shape is None else int(np.prod(value.shape, dtype=np.int64))


def _argument_edge(edge: str) -> Callable[[Value], bool] | None:
    """The predicate an argument's edge names, or None for a word outside the vocabulary."""
    fixed: dict[str, Callable[[Value], bool]] = {
        "0-d": lambda v: v.shape == () and v.kind in ("torch", "numpy", "tensorflow"),
        "empty": lambda v: _numel(v) == 0,
        "one element": lambda v: _numel(v) == 1 and bool(v.shape),
        "one row": lambda v: v.shape is not None and len(v.shape) >= 2 and v.shape[0] == 1,
        "1 axis": lambda v: v.shape is not None and len(v.shape) == 1 and v.kind in ("torch", "numpy", "tensorflow"),
        "3 or more axes": lambda v: v.shape is not None and len(v.shape) >= 3,
        "non-contiguous": lambda v: not v.contiguous,
        "requires grad": lambda v: v.requires_grad,
        "accelerator": lambda v: v.accelerator,
        "integer dtype": lambda v: bool(re.match(r"u?int\d+$", v.dtype)) and v.kind in ("torch", "numpy", "tensorflow"),
        "nan": lambda v: v.nan,
        "inf": lambda v: v.inf,
        "exact zero": lambda v: v.zero,
        "negative": lambda v: v.negative,
        "ties": lambda v: v.ties,
        "training mode": lambda v: v.training is True,
        "eval mode": lambda v: v.training is False,
        "numpy": lambda v: v.kind == "numpy",
        "torch": lambda v: v.kind == "torch",
        "tensorflow": lambda v: v.kind == "tensorflow",
        "python int": lambda v: v.kind == "int",
        "python float": lambda v: v.kind == "float",
    }
    if edge in fixed:
        return fixed[edge]
    if match := _MAGNITUDE.match(edge):
        bound = float(match["bound"])
        return lambda v: v.max_abs >= bound
    if match := _TINY.match(edge):
        bound = float(match["bound"])
        return lambda v: v.min_abs <= bound
    if match := re.fullmatch(r"instance of (?P<cls>\w+)", edge):
        return lambda v: match["cls"] in v.classes
    if re.fullmatch(r"(float|int|uint|complex|bfloat)\d+|bool", edge):
        return lambda v: v.dtype == edge
    return None


#: Edges of calls, over how many times one test cell called the function.
_CALL_EDGES = {"second call": 2, "third call": 3}


def _tracing() -> bool:
    """Whether torch is compiling the call (torch.compile, torch.export): a recorder's Python would be traced too."""
    torch = sys.modules.get("torch")
    return torch is not None and torch.compiler.is_compiling()


@dataclass
class Calls:
    """What the recorder saw of one function during one exercise's tests."""

    arguments: dict[str, list[Value]] = field(default_factory=lambda: defaultdict(list))
    most_in_one_test: int = 0
    count: int = 0


@dataclass
class Recorder:
    """Collects the calls of the wrapped functions made while an exercise's test cells run."""

    calls: dict[str, Calls] = field(default_factory=lambda: defaultdict(Calls))
    in_this_test: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    active: bool = False

    def wrap(self, fn: Callable, name: str) -> Callable:
        """`fn` recording each call's arguments by parameter name (self left out) while a test runs."""
        try:
            signature = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None

        @functools.wraps(fn)
        def recorded(*args, **kwargs):
            if self.active and not _tracing():
                self.active = False  # a call inside a recorded call (recursion, super()) is the same call
                try:
                    self._note(name, signature, args, kwargs)
                finally:
                    self.active = True
            return fn(*args, **kwargs)

        return recorded

    def _note(self, name: str, signature: inspect.Signature | None, args: tuple, kwargs: dict) -> None:
        try:
            bound = signature.bind(*args, **kwargs).arguments if signature else {}
        except TypeError:
            bound = {}
        bound = bound or {str(i): a for i, a in enumerate(args)} | kwargs
        calls = self.calls[name]
        calls.count += 1
        self.in_this_test[name] += 1
        calls.most_in_one_test = max(calls.most_in_one_test, self.in_this_test[name])
        for parameter, value in bound.items():
            if parameter not in ("self", "cls"):
                try:
                    found = describe(value)
                except Exception:  # a value a tracer made (symbolic sizes): recorded as what it is, nothing more
                    found = Value(type(value).__name__)
                calls.arguments[parameter].append(found)

    def start_test(self) -> None:
        self.in_this_test.clear()
        self.active = True


def defined_names(source: str) -> list[str]:
    """The top-level functions and classes a solution cell defines."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    return [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]


def instrument(namespace: dict, names: list[str], recorder: Recorder) -> Callable[[], None]:
    """Wrap the plain functions among `names` in `namespace`, and the methods classes among them define;
    returns what puts the originals back."""
    undo: list[Callable[[], None]] = []
    for name in names:
        obj = namespace.get(name)
        if inspect.isfunction(obj):
            namespace[name] = recorder.wrap(obj, name)
            undo.append(functools.partial(namespace.__setitem__, name, obj))
        elif inspect.isclass(obj):
            for attr, member in list(vars(obj).items()):
                wrapped = None
                if inspect.isfunction(member):
                    wrapped = recorder.wrap(member, f"{name}.{attr}")
                elif isinstance(member, (staticmethod, classmethod)):  # an autograd.Function's forward and backward
                    wrapped = type(member)(recorder.wrap(member.__func__, f"{name}.{attr}"))
                if wrapped is not None:
                    setattr(obj, attr, wrapped)
                    undo.append(functools.partial(setattr, obj, attr, member))
    return lambda: [step() for step in reversed(undo)]


@dataclass
class Finding:
    """One line of a contract's report."""

    exercise: str
    key: str
    edge: str
    met: int | None  # how many calls reached it; None: the edge or the function is unknown


def _edges(contract: dict[str, Any]):
    """(exercise, key, the key's match or None, edge) for every edge a contract lists."""
    for exercise, entry in contract.items():
        for key, edges in entry.items():
            if key != "text":
                for edge in edges if isinstance(edges, list) else [str(edges)]:
                    yield exercise, key, _KEY.match(key), edge


def unknown_edges(contract: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(exercise, key, edge) for each key that names no call and each edge outside the vocabulary."""
    return [(exercise, key, edge) for exercise, key, match, edge in _edges(contract)
            if match is None or (edge not in _CALL_EDGES if not match["arg"] else _argument_edge(edge) is None)]


def check(contract: dict[str, Any], recorded: dict[str, dict[str, Calls]]) -> list[Finding]:
    """Every edge of every exercise's contract against the calls recorded during its tests."""
    findings = []
    unknown = set(unknown_edges(contract))
    for exercise, key, match, edge in _edges(contract):
        seen = recorded.get(exercise, {}).get(match["call"]) if match else None
        if (exercise, key, edge) in unknown or seen is None:
            met = None
        elif not match["arg"]:
            met = seen.most_in_one_test if seen.most_in_one_test >= _CALL_EDGES[edge] else 0
        else:
            predicate, values = _argument_edge(edge), seen.arguments.get(match["arg"])
            met = None if values is None else sum(1 for v in values if predicate(v))
        findings.append(Finding(exercise, key, edge, met))
    return findings


def record_notebook(source: Path, exercises: set[str]) -> dict[str, dict[str, Calls]]:
    """{exercise: {function: Calls}} for the exercises of `source` named in its contract."""
    from dlkit.seeding import seed_everything, seed_for

    cells, shell = reference_shell(source)
    recorded: dict[str, dict[str, Calls]] = {}
    for index, cell in enumerate(cells):
        exercise = grade_id_of(cell) if is_solution(cell) else None
        if exercise not in exercises:
            continue
        recorder = Recorder()
        restore = instrument(shell.user_ns, defined_names(cell.source), recorder)
        try:
            for test in exercise_tests(cells, index):
                seed_everything(seed_for("contract", source.stem, grade_id_of(cells[test])))
                recorder.start_test()
                passed = run_cell(shell, cells[test].source, REFERENCE_CELL_SECONDS)
                recorder.active = False
                if not passed:
                    raise RuntimeError(f"{source.stem}: test {grade_id_of(cells[test])} fails on the reference while "
                                       "its calls are recorded")
        finally:
            restore()
        recorded[exercise] = dict(recorder.calls)
    return recorded


def report(name: str, findings: list[Finding]) -> str:
    lines = [f"# Contracts: {name}", "",
             "Each exercise's domain (autograder/contracts/) against the calls its hidden tests make on the reference "
             "(for an edge of the calls themselves: the most calls in one test).", "",
             "| exercise | argument | edge | calls reaching it |", "|---|---|---|---|"]
    for f in findings:
        met = "unknown edge or never called" if f.met is None else ("**none: a gap**" if f.met == 0 else str(f.met))
        lines.append(f"| {f.exercise} | `{f.key}` | {f.edge} | {met} |")
    gaps = [f for f in findings if not f.met]
    lines += ["", f"{len(findings) - len(gaps)} of {len(findings)} edges reached."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", help="default: every notebook with a contract")
    parser.add_argument("--out", type=Path, default=BUILD / "contracts")
    args = parser.parse_args(argv)
    os.environ.update({"DLKIT_DEVICES": ",".join(grading_devices("auto")), "MPLBACKEND": "Agg"})
    args.out.mkdir(parents=True, exist_ok=True)
    names = args.notebooks or sorted(p.stem for p in CONTRACTS.glob("*.toml"))
    if len(names) > 1:
        return each_alone("autograder.verify.contracts", names, ["--out", str(args.out)])
    failed = False
    for name in names:
        with open(CONTRACTS / f"{name}.toml", "rb") as f:
            contract = tomllib.load(f)
        findings = check(contract, record_notebook(assignments()[name], set(contract)))
        text = report(name, findings)
        (args.out / f"{name}.md").write_text(text)
        print(text)
        failed |= any(not f.met for f in findings)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
