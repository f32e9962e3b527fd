"""Void any test that ran while a submission had tampered with what the tests rely on.

While grading, the kit runs `snapshot()` in a cell it puts before all student code, and brackets
every test cell with two grader-written lines that ask for a check (autograder/grading/preprocessors.py).
`snapshot()` records the identity of what tests rely on:
- every callable and submodule attribute of the modules tests use (those the test cells import,
  plus builtins, math, random, numpy and numpy.random/testing/linalg, torch and the torch
  submodules tests use, dlkit and its submodules, tensorflow's if imported), and their
  sys.modules entries; the random generators are module attributes, so they are covered;
- the class dictionaries of torch.Tensor, torch.nn.Module, torch.nn.Parameter and random.Random
  (a key added there shadows an inherited method such as Tensor.numpy);
- the code, defaults and closure cells of every Python function among those;
- import hooks (sys.meta_path, sys.path_hooks, builtins.__import__), trace and profile hooks
  (sys and threading), IPython's exception display and run_cell methods, its input
  and AST transformers, custom exception handlers and user namespace;
- the live threads.
A check before and after each test cell compares all of it with the snapshot. Any difference, a
function's code swapped even briefly, a builtin the test calls shadowed by a different callable in
the notebook's namespace, or a live thread the submission started (one that runs notebook code,
or anything but library code) raises `TamperingDetected` in the test cell: nbgrader scores it 0
and the grader reports it as `tampered`. The originals are then put back, so each later test is
judged on its own. Honest changes are not differences: setting a global default or a seed changes
a library's state, not its functions; importing a module or a submodule only adds entries.

The checker is hard to reach from student code: it is a closure registered with
`sys.addaudithook`, which Python offers no way to remove, and the grader's lines trigger it by
assigning a function's `__code__` (an audited operation) with syntax alone, so no name the student
could rebind and no module attribute is on the path. Each passing after-check sends a marker on the
marker channel (channel.py: beside the cell's output, which student output cannot crowd out); a test
cell that raised nothing without a valid marker did not run the grader's lines (a replaced run_cell,
a transformer that dropped them) and the grader voids it (autograder/grading/results.py). A marker is
valid only with the HMAC of its test's name and nonce (the nonce is in that cell's source) under a
key the checker draws when installed and announces once, in the grader's own first cell, before any
student code ran; the key then lives only in the checker's closure. Student code that reads the
nonce from the cell's source, or a marker off the wire, still cannot make the marker of a test
whose checks it skipped.

What an in-process check cannot stop: writes to memory through ctypes; a module attribute
replaced and put back within one test cell by writing the module's __dict__; code that reaches
the checker's closure through gc or frames and edits its records (or reads its key); a thread
that runs only C code or code compiled under a library's file name. That is why the grader also
runs each submission in its own process under OS limits and in a sandbox, and keeps each executed
notebook for a TA to read.
"""

from __future__ import annotations

import importlib
import sys
from typing import Iterable

from . import channel
from .devices import preload_xla

#: The first item of the constant the grader's check lines carry; what the audit hook answers to.
REQUEST = "dlkit-integrity"
#: The text line of a passing after-check's marker: "<MARKER> <grade_id> <nonce>".
MARKER = "dlkit-integrity checked"

#: Modules always watched: what test code compares, checks, draws random inputs or raises with
#: (autograder/execution/warm.py preloads them, so the snapshot finds them imported).
CORE = ("builtins", "math", "random", "numpy", "numpy.random", "numpy.testing", "numpy.linalg",
        "torch", "torch.nn", "torch.nn.functional", "torch.testing", "torch.random", "torch.linalg",
        "torch.autograd", "dlkit")
#: Imported before the snapshot where their library is: importing them replaces functions of watched
#: modules (torch._dynamo wraps torch.manual_seed), which an optimizer's first step would otherwise do mid-test.
SETTLE = ("torch._dynamo",)
#: Watched too where a notebook imported them before the snapshot or its test cells import them.
MODULES = (*CORE, "tensorflow", "tensorflow.math", "tensorflow.random")
#: Classes whose own dictionaries are watched whole: a new key shadows an inherited method.
CLASSES = (("torch", "Tensor"), ("torch.nn", "Module"), ("torch.nn", "Parameter"), ("random", "Random"))
#: IPython methods whose replacement could hide a test's exception or skip the test.
SHELL_METHODS = ("showtraceback", "_showtraceback", "showsyntaxerror", "run_cell", "run_cell_async",
                 "run_ast_nodes", "run_code", "set_custom_exc", "transform_cell", "transform_ast")
#: Rebound around every execution, not watched: ipykernel forwards input() to the front end, IPython swaps
#: sys.excepthook and sys.displayhook per cell (and libraries that 07_deployment imports set excepthook).
REBOUND = {"builtins": ("input",), "sys": ("excepthook", "displayhook", "breakpointhook")}
#: Shell attributes whose identity must not change.
SHELL_ATTRIBUTES = ("user_ns", "user_global_ns", "ast_transformers", "input_transformers_post",
                    "input_transformers_cleanup")


class TamperingDetected(Exception):
    """Raised in a test cell that ran while something the tests rely on had been changed."""


_installed: list[bool] = []


def snapshot(modules: Iterable[str] = ()) -> None:
    """Record what the tests rely on and install the checker (once per kernel), before any student code runs.

    `modules`: what the notebook's test cells import; they are imported now, so that they are watched.
    """
    if _installed:
        return
    preload_xla()  # before the test cells' modules: torch_xla cannot be loaded after TensorFlow
    for group in (modules, (*CORE, *SETTLE)):  # numpy.random is imported lazily; so is torch._dynamo
        loaded = {name.split(".")[0] for name in sys.modules}
        for name in group:
            if group is modules or name.split(".")[0] in loaded:
                try:
                    importlib.import_module(name)
                except Exception:  # e.g. no tensorflow in this runtime: the test will fail on its own
                    pass
    guard = sys.modules.get("torch._dynamo.mutation_guard")
    if guard is not None:  # torch.compile's first call wraps nn.Module.__init__/__setstate__: do it now, once
        guard.install_generation_tagging_init()
    sys.addaudithook(_make_checker(tuple(modules)))
    _installed.append(True)


def _make_checker(extra_modules: tuple[str, ...]):
    """The audit hook that answers the grader's check requests; everything it uses is bound here.

    Installing it opens the marker channel: its key is drawn and announced here.
    """
    import _thread
    import builtins
    import os
    import sysconfig
    import threading
    import types
    from _hashlib import hmac_digest

    # Built-ins and helpers, bound now: the student can rebind the module-level names later.
    _type, _id, _len, _str, _tuple, _vars, _hasattr = type, id, len, str, tuple, vars, hasattr
    _getattr, _setattr, _delattr, _callable, _zip, _any = getattr, setattr, delattr, callable, zip, any
    _isinstance = isinstance
    _sys, _code_type = sys, types.CodeType
    _function, _module, _cell_type = types.FunctionType, types.ModuleType, types.CellType
    _modules, _current_frames = sys.modules, sys._current_frames
    _gettrace, _getprofile, _meta_path, _path_hooks = sys.gettrace, sys.getprofile, sys.meta_path, sys.path_hooks
    _thread_trace = _getattr(threading, "gettrace", lambda: None)
    _thread_profile = _getattr(threading, "getprofile", lambda: None)
    _active, _count, _get_ident = threading._active, _thread._count, _thread.get_ident
    _send, _key, _mac = channel.sender(), os.urandom(32), hmac_digest
    _builtins = builtins
    _missing = object()
    _detected = TamperingDetected
    roots = _tuple({os.path.realpath(p) + os.sep for key in ("stdlib", "platstdlib", "purelib", "platlib")
                    if (p := sysconfig.get_paths().get(key))}
                   | {os.path.realpath(os.path.dirname(os.path.dirname(__file__))) + os.sep})
    _realpath = os.path.realpath

    names = [n for n in _modules if n == "dlkit" or n.startswith("dlkit.")]
    names += [n for n in (*MODULES, *extra_modules) if n in _modules]
    watched: dict[str, tuple] = {}     # module name -> (module, {attribute: value})
    for name in dict.fromkeys(names):
        module = _modules[name]
        if _type(module) is _module or isinstance(module, _module):
            watched[name] = (module, {k: v for k, v in _vars(module).items()
                                      if _is_watched_value(v) and k not in REBOUND.get(name, ())})
    classes: dict[str, tuple] = {}     # qualified name -> (class, copy of its __dict__)
    for module_name, class_name in CLASSES:
        cls = _getattr(_modules.get(module_name), class_name, None)
        if _type(cls) is not _type(None):
            classes[f"{module_name}.{class_name}"] = (cls, dict(_vars(cls)))
    shell = _shell()
    user_ns = shell.user_ns if shell is not None else {}
    if shell is not None:
        for cls in _type(shell).__mro__:
            found = {k: v for k, v in _vars(cls).items() if k in SHELL_METHODS}
            if found:
                classes[f"IPython {cls.__name__}"] = (cls, found)
    shell_state = {a: _getattr(shell, a) for a in SHELL_ATTRIBUTES if _hasattr(shell, a)}
    shell_own = {a: v for a, v in _vars(shell).items() if a in SHELL_METHODS} if shell is not None else {}
    transformer_lists = {a: _tuple(v) for a, v in shell_state.items() if _type(v) is list}

    functions: dict[int, tuple] = {}   # id -> (function, label, __code__, __defaults__, __kwdefaults__, cells)
    def remember(value, label):
        if _type(value) is _function and _id(value) not in functions:
            cells = _tuple(c.cell_contents if _cell_filled(c) else _missing for c in value.__closure__ or ())
            functions[_id(value)] = (value, label, value.__code__, value.__defaults__, value.__kwdefaults__, cells)
    for name, (module, attrs) in watched.items():
        for attr, value in attrs.items():
            remember(value, f"{name}.{attr}")
    for label, (cls, attrs) in classes.items():
        for attr, value in attrs.items():
            remember(_getattr(value, "__func__", value), f"{label}.{attr}")

    # sys.excepthook is not watched: IPython swaps it around every cell and shows a cell's exception
    # through showtraceback (watched), and a library imported by 07_deployment sets it (measured).
    sys_state = {"sys.gettrace()": _gettrace(), "sys.getprofile()": _getprofile(),
                 "threading.gettrace()": _thread_trace(), "threading.getprofile()": _thread_profile()}
    hooks = {"sys.meta_path": _tuple(_meta_path), "sys.path_hooks": _tuple(_path_hooks)}
    baseline_threads = set(_current_frames()) | set(_active)
    baseline_raw = _count() - _len([t for t in _active.values()
                                    if _type(t).__name__ not in ("_MainThread", "_DummyThread")])
    noticed: list[str] = []            # filled by the hook between checks: brief changes to function code

    def _loaded_lazily(old, new) -> bool:
        """A lazy-loading module object (TensorFlow's LazyLoader) replaced by the module it loaded."""
        return _type(old) is not _module and _type(new) is _module and _isinstance(old, _module) \
            and _modules.get(old.__name__) is new

    _method = types.MethodType

    def same(a, b) -> bool:
        """Identity, or two bound methods of one function on one object (each access makes a new one)."""
        return a is b or (_type(a) is _method and _type(b) is _method
                          and a.__func__ is b.__func__ and a.__self__ is b.__self__)

    def sys_now():
        return {"sys.gettrace()": _gettrace(), "sys.getprofile()": _getprofile(),
                "threading.gettrace()": _thread_trace(), "threading.getprofile()": _thread_profile()}

    def is_library_code(code) -> bool:
        filename = _realpath(code.co_filename) if code.co_filename[:1] == "/" else code.co_filename
        return filename.startswith(roots)

    def runs_notebook_code(frame) -> bool:
        while frame is not None:
            if frame.f_globals is user_ns or not is_library_code(frame.f_code):
                return True
            frame = frame.f_back
        return False

    def thread_entry(thread):
        """The Python function a threading.Thread runs: its overridden run(), else its target unwrapped."""
        run = _getattr(_type(thread), "run", None)
        if run is not threading.Thread.run and _type(thread) is not threading.Timer:
            return run
        target = _getattr(thread, "_target", None) if _type(thread) is not threading.Timer else thread.function
        for _ in (1, 2, 3, 4, 5):
            target = _getattr(target, "__func__", _getattr(target, "func", target))
        return target

    def foreign_threads() -> list[str]:
        found = []
        frames = _current_frames()
        me = _get_ident()
        for ident, frame in frames.items():
            if ident in baseline_threads or ident == me:
                continue
            thread = _active.get(ident)
            label = f"thread {_vars(thread).get('_name')!r}" if thread is not None else f"a thread (id {ident})"
            if runs_notebook_code(frame):
                found.append(f"{label}, started by the submission, was running notebook code")
                continue
            if thread is not None and _type(thread).__name__ != "_DummyThread":
                entry = thread_entry(thread)
                # None: run() has returned (Thread.run deletes its target) and the thread is only deregistering,
                # as a multiprocessing QueueFeederThread after a DataLoader's workers stop; it runs nothing more.
                if entry is not None and (_type(entry) is not _function or entry.__globals__ is user_ns
                                          or not is_library_code(entry.__code__)):
                    found.append(f"{label}, started by the submission, runs {_type(entry).__name__} "
                                 f"{_vars(entry).get('__qualname__', '') if _type(entry) is _function else ''}")
        raw = _count() - _len([t for t in _active.values() if _type(t).__name__ not in ("_MainThread", "_DummyThread")])
        if raw > baseline_raw:
            found.append(f"{raw - baseline_raw} thread(s) started with _thread.start_new_thread")
        return found

    def differences() -> list[str]:
        changes = []
        for name, (module, attrs) in watched.items():
            if _modules.get(name) is not module:
                changes.append(f"sys.modules[{name!r}] was replaced")
                _modules[name] = module
            current = _vars(module)
            for attr, value in attrs.items():
                now = current.get(attr, _missing)
                if now is not value and not _loaded_lazily(value, now):
                    changes.append(f"{name}.{attr} was {'deleted' if now is _missing else 'replaced'}")
                    current[attr] = value
        for label, (cls, attrs) in classes.items():
            current = _vars(cls)
            whole = not label.startswith("IPython ")
            for attr in (_tuple(current) if whole else ()):
                if attr not in attrs and _is_watched_value(current[attr]):
                    changes.append(f"{label}.{attr} was added, shadowing what the tests call")
                    _delattr(cls, attr)
            for attr, value in attrs.items():
                now = current.get(attr, _missing)
                if now is not value and (whole or attr in SHELL_METHODS):
                    changes.append(f"{label}.{attr} was {'deleted' if now is _missing else 'replaced'}")
                    _setattr(cls, attr, value)
        for function, label, code, defaults, kwdefaults, cells in functions.values():
            if function.__code__ is not code or function.__defaults__ is not defaults \
                    or function.__kwdefaults__ is not kwdefaults:
                changes.append(f"the code of {label} was replaced")
                function.__code__, function.__defaults__, function.__kwdefaults__ = code, defaults, kwdefaults
            for cell, value in _zip(function.__closure__ or (), cells):
                if (cell.cell_contents if _cell_filled(cell) else _missing) is not value:
                    changes.append(f"a variable captured by {label} was replaced")
                    if value is not _missing:
                        cell.cell_contents = value
        if shell is not None:
            for name in SHELL_METHODS:  # an instance attribute shadows the class's method
                now = _vars(shell).get(name, _missing)
                if not same(now, shell_own.get(name, _missing)):
                    changes.append(f"get_ipython().{name} was replaced")
                    if name in shell_own:
                        _setattr(shell, name, shell_own[name])
                    else:
                        _delattr(shell, name)
            for attr, value in shell_state.items():
                if not same(_getattr(shell, attr, _missing), value):
                    changes.append(f"get_ipython().{attr} was replaced")
                    _setattr(shell, attr, value)
            for attr, items in transformer_lists.items():
                if _tuple(shell_state[attr]) != items:
                    changes.append(f"get_ipython().{attr} was changed (code that rewrites cells)")
                    shell_state[attr][:] = items
            if shell.custom_exceptions:
                changes.append("get_ipython().set_custom_exc was used")
                shell.set_custom_exc((), None)
        for label, value in sys_now().items():
            if not same(value, sys_state[label]):
                changes.append(f"{label} was replaced")
        for label, items in hooks.items():
            live = _getattr(_sys, label[4:])
            if live is not (_meta_path if label == "sys.meta_path" else _path_hooks) \
                    or _len(live) != _len(items) or _any(a is not b for a, b in _zip(live, items)):
                changes.append(f"{label} was changed (an import hook)")
        return changes

    def shadowed_builtins(used: tuple) -> list[str]:
        out = []
        for name in used:
            value = user_ns.get(name, _missing)
            original = _vars(_builtins).get(name, _missing)
            if value is not _missing and value is not original and _callable(value):
                out.append(f"the notebook defines {name!r}, hiding the built-in the test calls")
        return out

    def check(when: str, grade_id: str, used: tuple, nonce: str) -> None:
        found = _tuple(dict.fromkeys([*noticed, *differences(), *foreign_threads(), *shadowed_builtins(used)]))
        noticed.clear()
        if found:
            shown = "; ".join(found[:6]) + (f"; and {_len(found) - 6} more" if _len(found) > 6 else "")
            where = "before this test ran" if when == "before" else "while this test ran"
            raise _detected(f"{shown} ({where})")
        if when == "after":
            mac = _mac(_key, f"{grade_id} {nonce}".encode(), "sha256").hex()
            _send({"marker": "integrity", "grade_id": grade_id, "nonce": nonce, "mac": mac},
                  f"{MARKER} {grade_id} {nonce}")

    def hook(event, args):
        if event != "object.__setattr__" or _len(args) != 3 or _type(args[1]) is not _str:
            return
        target, attribute, value = args
        if attribute not in ("__code__", "__defaults__", "__kwdefaults__"):
            return
        if _id(target) in functions and functions[_id(target)][0] is target:
            noticed.append(f"the code of {functions[_id(target)][1]} was replaced")
            return
        if attribute == "__code__" and _type(target) is _function and _type(value) is _code_type:
            for const in value.co_consts:
                if _type(const) is _tuple and _len(const) == 5 and const[0] == REQUEST:
                    _, when, grade_id, used, nonce = const
                    check(when, grade_id, used, nonce)

    _send({"marker": "channel", "key": _key.hex()}, "dlkit-integrity: the grader's checks are installed")
    return hook


def _is_watched_value(value) -> bool:
    """Callables and modules: what tests call or import through. Plain data may change legitimately (caches)."""
    import types

    return callable(value) or type(value) is types.ModuleType


def _cell_filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _shell():
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def request(when: str, grade_id: str, builtins_used: Iterable[str] = (), nonce: str = "") -> str:
    """The line the grader puts in a test cell to ask for a check: syntax only, no name the student could rebind."""
    const = (REQUEST, when, grade_id, tuple(builtins_used), nonce)
    return f"(lambda: None).__setattr__('__code__', (lambda: {const!r}).__code__)  # inserted by the grader"
