"""The kernel's half of the judge: run the student's code on the inputs the judge sends, send back plain data.

The grader's judge (autograder/judge/) runs the hidden tests in its own process, outside the
kernel's sandbox, with the reference and the expected values. Where a test calls a student's
function, the judge asks the kernel to call it: one request per call, sent as a Jupyter
`user_expressions` entry, `handle(request)`, whose text reply is one wire.py message. This module
is that entry point. It holds nothing the judge relies on: a student may patch it, and then only
changes what their own functions are seen to return, which the judge checks like any answer.

Objects that are not plain data (a class instance, a module of the student's, a generator) stay
here in a table, and the judge gets a handle: a number it can only ask about (call it, read an
attribute). Nothing the kernel prints during a request goes anywhere: stdout and stderr are
dropped, so a call that prints megabytes costs the grader nothing.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import types
from typing import Any

from . import globalstate, wire

#: Longest exception message a reply carries.
MAX_MESSAGE = 4000
_objects: dict[int, Any] = {}
_handles: dict[int, int] = {}
#: The autograd graphs of calls the judge may backpropagate through: call number -> (inputs, outputs).
_graphs: dict[int, tuple[list, list]] = {}


class _Raw(str):
    """A reply whose text IPython shows as it is (no quotes, no escapes): the judge reads it as the message."""

    def __repr__(self) -> str:
        return str.__str__(self)

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str.__str__(self))


def _as_handle(value: Any) -> dict:
    """Keep `value` here and send a number for it, with what the judge may know without asking: type, callable."""
    key = _handles.get(id(value))
    if key is None or _objects.get(key) is not value:
        key = len(_objects) + 1
        _objects[key], _handles[id(value)] = value, key
    kind = type(value)
    return {"t": "handle", "v": key, "type": f"{kind.__module__}.{kind.__qualname__}", "callable": callable(value),
            "class": isinstance(value, type)}


class _Callback:
    """A function of the judge's, passed to the student's code (the `f` of a numeric gradient): each call is an
    input request to the judge (Jupyter's stdin channel), which runs its function on the plain data sent."""

    def __init__(self, key: int) -> None:
        self._key = key

    def __call__(self, *args, **kwargs):
        from IPython import get_ipython

        encoder = wire.Encoder(handle=_as_handle)
        request = {"callback": self._key, "args": encoder.encode(list(args)), "kwargs": encoder.encode(dict(kwargs))}
        reply = wire.loads(get_ipython().kernel.raw_input(CALLBACK_PROMPT + wire.dumps(request)))
        if "raised" in reply:
            raised = reply["raised"]
            kind = getattr(builtins, str(raised.get("type")), None)
            if not (isinstance(kind, type) and issubclass(kind, Exception)):
                kind = RuntimeError
            raise kind(str(raised.get("message", "")))
        return wire.Decoder(resolve=_object).decode(reply.get("ok"))


#: What starts the prompt of an input request that is a call of one of the judge's functions.
CALLBACK_PROMPT = "[dlkit-callback] "


def _object(record: dict) -> Any:
    if record.get("callback") is True and type(record.get("v")) is int:
        return _Callback(record["v"])
    key = record.get("v")
    if type(key) is not int or key not in _objects:
        raise wire.WireError(f"no object {key!r} in this kernel")
    return _objects[key]


def _encode(value: Any) -> Any:
    return wire.Encoder(handle=_as_handle).encode(value)


def _describe(value: Any) -> dict:
    if isinstance(value, types.ModuleType):
        return {"module": str(getattr(value, "__name__", ""))}
    return {"value": _encode(value)}


def _raised(err: BaseException) -> dict:
    """The exception as data: its name, and the nearest of Python's own exception classes it derives from (the
    judge raises that one, so a test's `except ValueError` catches a subclass of ValueError, as it would here)."""
    kind = type(err)
    base = next((k for k in kind.__mro__ if getattr(builtins, k.__name__, None) is k), Exception)
    return {"raised": {"type": kind.__name__, "builtin": base is kind, "base": base.__name__,
                       "message": str(err)[:MAX_MESSAGE]}}


def _placement(place: Any):
    if not place:
        return contextlib.nullcontext()
    from .ondevice import _placement as placement

    kind, framework = place
    return placement(str(kind), str(framework))


def _watched(watch: Any, fn, args: list, kwargs: dict, name: str):
    """Call fn, watched as the test asked: count its torch operations, or refuse float64 on the way."""
    from . import checks

    if watch == "ops":
        result, ops = checks.dispatched_ops(lambda *a: fn(*a, **kwargs), *args)
        return result, {"ops": ops}
    if watch == "functions":
        result, names = checks.called_functions(lambda *a: fn(*a, **kwargs), *args)
        return result, {"functions": sorted(names)}
    if watch == "float64":
        return checks.assert_no_float64(lambda *a: fn(*a, **kwargs), *args, name=name), {}
    return fn(*args, **kwargs), {}


def _snapshot(values: list) -> list:
    """Each argument's encoding and storage now, to tell afterwards which ones the call changed (None: not plain)."""
    out = []
    for value in values:
        try:
            out.append((wire.dumps({"v": wire.Encoder().encode(value)}), _storage(value)))
        except (wire.WireError, TypeError, ValueError):
            out.append(None)
    return out


def _storage(value: Any) -> int | None:
    """Where a tensor's data lives: a call that gave an argument new storage (`w.data = ...`) is told apart."""
    data_ptr = getattr(value, "data_ptr", None)
    try:
        return data_ptr() if callable(data_ptr) and type(value).__module__.startswith("torch") else None
    except RuntimeError:
        return None


def _call(request: dict) -> dict:
    target = _object({"v": request.get("target")})
    method = request.get("method")
    fn = getattr(target, str(method)) if method else target
    decoder = wire.Decoder(resolve=_object)
    args = decoder.decode(request.get("args", []))
    kwargs = decoder.decode(request.get("kwargs", {"t": "dict", "v": []}))
    if type(args) is not list or type(kwargs) is not dict:
        raise wire.WireError("a call's arguments are a list and a dict")
    before, state, reseeds = _snapshot(args), globalstate.snapshot(), globalstate.Reseeds(fn, args, kwargs)
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), _placement(request.get("place")), \
                reseeds:
            result, observed = _watched(request.get("watch"), fn, args, kwargs, str(request.get("name", "")))
    except Exception as err:
        globalstate.put_back(state)
        return _raised(err)
    left = globalstate.put_back(state, reseeds, (args, kwargs))
    after = _snapshot(args)
    changed = {str(i): _encode(arg) for i, (arg, old, new) in enumerate(zip(args, before, after)) if old != new}
    moved = [i for i, (old, new) in enumerate(zip(before, after)) if old and new and old[1] != new[1]]
    encoder = wire.Encoder(handle=_as_handle)
    reply = {"ok": encoder.encode(result), "changed": changed, "new_storage": moved, "left_state": left, **observed}
    if request.get("graph"):  # the judge backpropagates through this call: keep its graph
        key = len(_graphs) + 1
        _graphs[key] = (wire.requiring_grad(decoder.decoded), wire.requiring_grad(encoder.kept))
        reply["graph"] = key
    else:
        reply["same_as_arg"] = next((i for i, arg in enumerate(args) if result is arg), None)
    return reply


def _backward(request: dict) -> dict:
    """Gradients of a kept call's inputs, given its outputs' gradients: the student's backward runs here."""
    import torch

    key = request.get("graph")
    if type(key) is not int or key not in _graphs:
        raise wire.WireError(f"no graph {key!r} in this kernel")
    inputs, outputs = _graphs[key]
    grads = wire.Decoder().decode(request.get("grads", []))
    if type(grads) is not list or len(grads) != len(outputs):
        raise wire.WireError("one gradient per output")
    pairs = [(out, grad) for out, grad in zip(outputs, grads) if grad is not None]
    # a backward is given no seed: any reseed in it is one it was not given
    before, state, reseeds = _snapshot(grads), globalstate.snapshot(), globalstate.Reseeds(None, [], {})
    sink = io.StringIO()
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink), _placement(request.get("place")), \
                reseeds:
            found = torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True,
                                        retain_graph=True) if pairs and inputs else [None] * len(inputs)
    except Exception as err:
        globalstate.put_back(state)
        return _raised(err)
    left = globalstate.put_back(state, reseeds)
    changed = {str(i): _encode(g) for i, (g, old, new) in enumerate(zip(grads, before, _snapshot(grads))) if old != new}
    return {"ok": _encode(list(found)), "changed": changed, "left_state": left}


def _serve(request: dict) -> dict:
    op = request.get("op")
    if op == "begin":  # a test starts: seed this kernel as the judge seeds itself, then say what its names are
        from .seeding import seed_everything

        seed_everything(int(request["seed"]))
        space = _user_namespace()
        return {"names": {str(name): (_describe(space[name]) if name in space else {"missing": True})
                          for name in request.get("names", [])}}
    if op == "call":
        return _call(request)
    if op == "backward":
        return _backward(request)
    if op == "define":  # a test's helper to run here (dlkit.in_kernel): the notebook's names in reach
        space = dict(_user_namespace())
        exec(compile(str(request.get("source")), "<the grader's helper>", "exec"), space)
        return {"ok": _as_handle(space[str(request.get("name"))])}
    if op == "getattr":
        try:
            return {"ok": _encode(getattr(_object({"v": request.get("target")}), str(request.get("name"))))}
        except Exception as err:
            return _raised(err)
    raise wire.WireError(f"unknown request {op!r}")


def _user_namespace() -> dict:
    """The notebook's variables: IPython's user namespace (the module's globals outside a kernel)."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        shell = None
    return shell.user_ns if shell is not None else {}


def handle(request: str) -> _Raw:
    """Answer one judge request (wire.py JSON); every failure of the request itself becomes an "error" reply."""
    try:
        reply = _serve(wire.loads(request))
    except Exception as err:
        reply = {"error": f"{type(err).__name__}: {str(err)[:MAX_MESSAGE]}"}
    try:
        return _Raw(wire.dumps(reply))
    except (TypeError, ValueError) as err:
        return _Raw(wire.dumps({"error": f"the reply could not be sent: {err}"[:MAX_MESSAGE]}))
