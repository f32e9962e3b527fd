"""Global state a student's call may leave changed for every later call, read before and after it and put back.

The judge's agent (agent.py) runs each call of a hidden test in the student's kernel. A call that switches
torch's default dtype or grad mode, leaves a torch.distributed process group open, reseeds a global random
generator with a seed it was not given, or changes TensorFlow's eager mode, `run_functions_eagerly` or default
graph would change every later call of every later test: the test fails naming the change (the judge's
remote.py), and the kernel puts back what it can, so no later test meets it. A call that writes files in the
working folder where none of its arguments points (a cache, a hard-coded `model.onnx`) fails the same way; the
reference writes only where it is told. Read on every call, so `snapshot` reads a few flags of libraries already
imported, lists a small folder and imports nothing.
"""

from __future__ import annotations

import contextlib
import inspect
import numbers
import os
import sys
import time
from typing import Any

#: The names a call's changes to global state are reported by.
_DTYPE, _GRAD, _GROUP = "torch's default dtype", "torch's grad mode", "an open torch.distributed process group"
_TORCH_RNG, _TF_SEED = "torch's global random generator", "TensorFlow's global seed"
_TF_EAGER, _TF_FUNCTIONS, _TF_GRAPH = ("TensorFlow's eager execution", "tf.config.functions_run_eagerly()",
                                       "TensorFlow's default graph")
_FILES = "files in the working folder"
#: A working folder with more entries than this is not compared.
_MAX_LISTED = 2000
#: Python's and NumPy's global generators, which hold no seed to read back: their module, what the reports call
#: them, the functions that reseed them or replace their state, and the one that reads their state.
_LEGACY_RNGS = (("random", "Python's global random generator (random)", ("seed", "setstate"), "getstate"),
                ("numpy.random", "NumPy's global random generator (np.random)", ("seed", "set_state"), "get_state"))


def snapshot() -> dict[str, Any]:
    """What one call may change for every later one: torch's default dtype and grad mode, whether a
    torch.distributed process group is open in this process, torch's initial seed (only where torch is imported);
    TensorFlow's eager mode, run_functions_eagerly, default graph and global seed (only where it is imported).
    Called twice a call, so it reads a few flags and imports nothing (a few microseconds, TensorFlow included)."""
    state: dict[str, Any] = {}
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = sys.modules.get("torch.distributed")
        group = dist is not None and dist.is_available() and dist.is_initialized()
        state.update({_DTYPE: torch.get_default_dtype(), _GRAD: torch.is_grad_enabled(), _GROUP: group,
                      _TORCH_RNG: torch.initial_seed()})
    if "tensorflow" in sys.modules:
        state.update(_tf_state())
    state[_FILES] = _working_names()
    return state


#: The working folder's names as last read: (folder, its modification time, the names). A folder is re-read only
#: when its modification time moves, or when that time is recent enough that a tick of the file system's coarse
#: clock could still hide a change after the read.
_listed: tuple[str, int, frozenset[str] | None] | None = None
_RECENT_NS = 100_000_000


def _working_names() -> frozenset[str] | None:
    """The names in the working folder (hidden ones and __pycache__ left out: the kernel's own caches live in such
    folders of its home, and their writes are nobody's answer); None where it cannot be read or holds more than
    _MAX_LISTED. Files created or deleted there change the folder's modification time, so a call costs one stat."""
    global _listed
    try:
        folder = os.getcwd()
        mtime = os.stat(folder).st_mtime_ns
    except OSError:
        return None
    if _listed is not None and _listed[:2] == (folder, mtime) and time.time_ns() - mtime > _RECENT_NS:
        return _listed[2]
    try:
        with os.scandir(folder) as entries:
            names = [entry.name for entry in entries if not entry.name.startswith(".") and entry.name != "__pycache__"]
    except OSError:
        return None
    _listed = (folder, mtime, frozenset(names) if len(names) <= _MAX_LISTED else None)
    return _listed[2]


def _paths_named(args: list, kwargs: dict) -> list[str]:
    """The paths a call's arguments name (strings and os.PathLike, one level into lists, tuples and dicts), relative
    to the working folder: where a call may write (`export_onnx(model, example, path)`)."""
    named = []
    for value in (*args, *kwargs.values()):
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
        for item in (value, *inner):
            if isinstance(item, (str, os.PathLike)):
                with contextlib.suppress(TypeError, ValueError):
                    named.append(os.path.relpath(os.path.abspath(os.fspath(item))))
    return named


def _files_written(before: frozenset[str] | None, after: frozenset[str] | None, named: list[str]) -> str | None:
    """The files a call created or deleted in the working folder at paths none of its arguments names (`path`
    itself, a name that starts with it: `model.onnx.data`, or the folder it lies in: `exports` of
    `exports/model.onnx`), or None."""
    if before is None or after is None:
        return None
    changes = [f"{_short(name)} {'created' if name in after else 'deleted'}" for name in sorted(before ^ after)
               if not any(path in (".", "") or name.startswith(path) or path.split(os.sep, 1)[0] == name
                          for path in named)]
    if not changes:
        return None
    more = f" and {len(changes) - 5} more" if len(changes) > 5 else ""
    return f"{_FILES}: {', '.join(changes[:5])}{more} inside the call, at paths none of its arguments names"


def _tf_state() -> dict[str, Any]:
    """TensorFlow's global state, read without side effects: `get_default_graph()` would create the global default
    graph (after which TF refuses enable_eager_execution) and `global_seed()` the eager context, so the graph stack
    and the seed are read as they are."""
    try:
        tf = sys.modules["tensorflow"]
        context = sys.modules["tensorflow.python.eager.context"]
        graphs = sys.modules["tensorflow.python.framework.ops"]._default_graph_stack
        eager = context.context_safe()
        return {_TF_EAGER: context.executing_eagerly(), _TF_FUNCTIONS: tf.config.functions_run_eagerly(),
                _TF_GRAPH: (tuple(graphs.stack), graphs._global_default_graph),
                _TF_SEED: getattr(eager, "_seed", None)}
    except Exception:  # a TensorFlow half imported, or one whose internals moved: nothing to compare
        return {}


def _ints_given(fn: Any, args: list, kwargs: dict) -> set[int]:
    """Every int a call was given: its arguments and the defaults of those it left out (`def toy_model(seed=1)`),
    and one level into lists, tuples and dicts (`seed=[s0, s1]`); only computed when a call reseeds."""
    try:
        signature = inspect.signature(fn)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        values = []
        for name, value in bound.arguments.items():
            kind = signature.parameters[name].kind
            values.extend(value.values() if kind is inspect.Parameter.VAR_KEYWORD else
                          value if kind is inspect.Parameter.VAR_POSITIONAL else (value,))
    except (TypeError, ValueError):  # no signature (a builtin), or arguments it does not take (the call raised)
        values = [*args, *kwargs.values()]
    found = set()
    for value in values:
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
        for item in (value, *inner):
            if isinstance(item, numbers.Integral) and not isinstance(item, bool):
                found.add(int(item))
    return found


class Reseeds:
    """The global random generators a call reseeds with a seed it was not given (`torch.manual_seed(0)` in a
    function the test called without a seed), as lines of left_state. Seeding with its own argument or default
    (`make_model(n_in, n_out, seed)`, `toy_model(seed=1)`) is what reference code does, and is left alone.

    torch's and TensorFlow's seeds are read before and after the call. Python's and NumPy's generators have no
    seed to read, so their seeding functions are wrapped for the duration of the call (where the call looks them
    up as module attributes, `np.random.seed(0)`; a `from random import seed` made earlier is not seen). Replacing
    the state (`np.random.set_state`) counts as reseeding, except with a state the call read itself before it
    reseeded (save and restore) or was given.

    Nothing is put back: the judge reseeds the kernel at every test's `begin`, and the test that reseeded fails
    anyway, so restoring the generators' state would cost every call (a NumPy state is 2.5 KB) for nothing.
    """

    def __init__(self, fn: Any, args: list, kwargs: dict) -> None:
        self._fn, self._args, self._kwargs = fn, args, kwargs
        self._given: set[int] | None = None
        self._left: dict[str, str | None] = {}  # generator -> how the call leaves it, None: as it found it
        self._read: dict[int, tuple[Any, str | None]] = {}  # id of a state the call read -> (it, the generator then)
        self._wrapped: list[tuple[Any, str, Any]] = []

    def given(self, seed: Any) -> bool:
        if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
            return False
        if self._given is None:
            found = _ints_given(self._fn, self._args, self._kwargs)
            self._given = found | {n % 2**64 for n in found}  # torch's initial_seed() reads -1 as 2**64 - 1
        return int(seed) in self._given

    def __enter__(self) -> "Reseeds":
        for module_name, what, setters, getter in _LEGACY_RNGS:
            module = sys.modules.get(module_name)
            for name in (*setters, getter) if module is not None else ():
                original = getattr(module, name, None)
                if callable(original):
                    self._wrapped.append((module, name, original))
                    setattr(module, name, self._watching(what, name, name == getter, original))
        return self

    def __exit__(self, *exc) -> None:
        while self._wrapped:
            module, name, original = self._wrapped.pop()
            setattr(module, name, original)

    def _watching(self, what: str, name: str, reads: bool, original: Any):
        def watched(*args, **kwargs):  # no functools.wraps: at every call it would cost more than the rest together
            result = original(*args, **kwargs)  # first: a seed it refuses changes nothing
            if reads:
                self._read[id(result)] = (result, self._left.get(what))
            elif name == "seed":
                seed = args[0] if args else next(iter(kwargs.values()), None)
                self._left[what] = None if self.given(seed) else (
                    f"{what}: reseeded with {_short(seed)} inside the call, a seed it was not given")
            else:
                state = args[0] if args else next(iter(kwargs.values()), None)
                read = self._read.get(id(state))
                if read is not None and read[0] is state:
                    self._left[what] = read[1]
                elif not any(state is value for value in (*self._args, *self._kwargs.values())):
                    self._left[what] = (f"{what}: its state replaced ({name}) inside the call with a state it was "
                                        "not given")
            return result

        watched.__wrapped__ = original
        return watched

    def reseeded(self) -> bool:
        """Whether the call reseeded Python's or NumPy's generator (torch's and TensorFlow's: see `left`)."""
        return any(self._left.values())

    def left(self, state: dict[str, Any], now: dict[str, Any]) -> list[str]:
        """The generators the call left reseeded: torch's and TensorFlow's seeds, then Python's and NumPy's."""
        found = [line for line in self._left.values() if line]
        for what in (_TORCH_RNG, _TF_SEED):
            seed = now.get(what)
            if what in state and seed != state[what] and seed is not None and not self.given(seed):
                found.insert(0, f"{what}: reseeded with {seed} inside the call, a seed it was not given")
        return found


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _tf_graph_change(before: tuple, after: tuple) -> str | None:
    """How the call left TensorFlow's default graph: a graph entered and never left, the global one replaced.
    A global default graph made during the call where there was none is TensorFlow's own doing (it is made lazily)."""
    entered, known = before
    entered_now, known_now = after
    if len(entered_now) != len(entered) or any(a is not b for a, b in zip(entered, entered_now)):
        more = len(entered_now) - len(entered)
        return (f"{_TF_GRAPH}: {'a graph' if more == 1 else f'{more} graphs'} entered (graph.as_default()) inside "
                "the call and never left" if more > 0 else f"{_TF_GRAPH}: graphs entered before the call left by it")
    if known is not None and known_now is not known:
        return f"{_TF_GRAPH}: the global default graph replaced (tf.compat.v1.reset_default_graph) inside the call"
    return None


def put_back(state: dict[str, Any], reseeds: Reseeds | None = None,
             arguments: tuple[list, dict] | None = None) -> list[str]:
    """Restore what a call changed of `state` (so later tests start as the notebook left them); what it changed.
    Files the call wrote where its `arguments` (args, kwargs) do not point are reported, never removed: they are
    the student's, and the working folder is theirs."""
    now = snapshot()
    if now == state and (reseeds is None or not reseeds.reseeded()):
        return []  # nearly every call: one comparison
    left, repaired = [], _tf_repaired(state, now)
    if now.get(_FILES) != state.get(_FILES):  # the paths the arguments name, only where files changed
        named = _paths_named(*arguments) if arguments is not None else []
        left += filter(None, [_files_written(state.get(_FILES), now.get(_FILES), named)])
    for what in (what for what in state if what in now and now[what] != state[what] and what != _FILES):
        if what == _TF_EAGER and not repaired:
            left.append(f"{what}: on before the call, off after it")
        elif what == _TF_GRAPH and not repaired:  # switching eager mode back on takes a new global graph
            left += filter(None, [_tf_graph_change(state[what], now[what])])
        elif what not in (_TF_EAGER, _TF_GRAPH, _TORCH_RNG, _TF_SEED):  # reseeding: below
            left.append(f"{what}: {state[what]} before the call, {now[what]} after it")
    left += reseeds.left(state, now) if reseeds is not None else []
    if not left:
        return left
    if _DTYPE in state:
        torch = sys.modules["torch"]
        torch.set_default_dtype(state[_DTYPE])
        torch.set_grad_enabled(state[_GRAD])
        if now[_GROUP] and not state[_GROUP]:
            with contextlib.suppress(Exception):
                sys.modules["torch.distributed"].destroy_process_group()
    if _TF_EAGER in state and _TF_EAGER in now:
        with contextlib.suppress(Exception):  # a TensorFlow whose internals moved: reported all the same
            _tf_put_back(state, now)
    return left


def _tf_repaired(state: dict[str, Any], now: dict[str, Any]) -> bool:
    """Whether the call switched eager mode back on: what a test that found it off does to grade what follows
    (05's test_tf1_leaves_tf2_working), TensorFlow's default state, neither reported nor undone."""
    return state.get(_TF_EAGER) is False and now.get(_TF_EAGER) is True


def _tf_put_back(state: dict[str, Any], now: dict[str, Any]) -> None:
    """Put TensorFlow back as the call found it, as far as TensorFlow allows; each step on its own. Eager mode
    that was off before the call is left as the call left it (see _tf_repaired)."""
    tf = sys.modules["tensorflow"]
    graphs = sys.modules["tensorflow.python.framework.ops"]._default_graph_stack
    if now[_TF_FUNCTIONS] != state[_TF_FUNCTIONS]:
        with contextlib.suppress(Exception):
            tf.config.run_functions_eagerly(state[_TF_FUNCTIONS])
    entered, known = state[_TF_GRAPH]
    if len(graphs.stack) > len(entered) and all(a is b for a, b in zip(entered, graphs.stack)):
        with contextlib.suppress(Exception):  # graphs entered and not left: leave them, innermost first
            _leave_graphs(graphs.stack[len(entered):])
        # A block whose manager was not found is dropped from the stack by hand; the entry it pushed on the eager
        # context's context_switches stays (only the manager's exit pops it), and graph mode is undone below.
        del graphs.stack[len(entered):]
    if known is not None and graphs._global_default_graph is not known and not _tf_repaired(state, now):
        # reset_default_graph: the old global graph comes back (what the call built in the new one is dropped)
        graphs._global_default_graph = known
    if state[_TF_EAGER] and not sys.modules["tensorflow.python.eager.context"].executing_eagerly():
        # disable_eager_execution(): TensorFlow 2.21 re-enables eager mode only while no global default graph
        # exists (else "must be called at program startup"), so the graph is set aside for the call and then
        # brought back. This also switches the thread's graph-mode flag back where a graph block was dropped by
        # hand above. What cannot be undone: ops the call built in the global graph meanwhile stay there, and
        # eager mode switched off in another thread than this one is neither seen nor restored.
        graphs._global_default_graph = None
        try:
            tf.compat.v1.enable_eager_execution()
        except Exception:
            pass
        finally:
            graphs._global_default_graph = known if known is not None else now[_TF_GRAPH][1]


def _leave_graphs(entered: list) -> None:
    """Exit the `graph.as_default()` blocks of `entered` that the call opened with `__enter__` and kept open: each
    one's context manager also holds TensorFlow's graph-mode switch, which only its own exit undoes. They are
    found by the garbage collector's referrers (a fraction of a second, only after a call that left one open); a
    block whose manager is gone has left already (a generator closes when collected)."""
    import gc

    for graph in reversed(entered):
        for generator in gc.get_referrers(graph):
            code = getattr(generator, "gi_code", None)
            if code is None or generator.gi_frame is None or not getattr(
                    code, "co_qualname", "").endswith("_DefaultGraphStack.get_controller"):
                continue
            for manager in gc.get_referrers(generator):
                if getattr(manager, "gen", None) is generator and hasattr(manager, "__exit__"):
                    manager.__exit__(None, None, None)
