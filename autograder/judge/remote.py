"""The judge's link to a student's kernel: requests out, plain data back (src/dlkit/agent.py answers them).

The judge never receives an object whose methods run: a reply is a wire.py message, decoded into
ints, floats, strings, NumPy arrays and torch tensors built here from raw bytes. What is not plain
data stays in the kernel and arrives as a `Remote`, which the judge can only call or ask about,
each time through the kernel. A kernel that answers with anything else gets a failed test, never
an exception a test could catch and pass over (`RefusedReply` is not an `Exception`).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from typing import Any, Callable, Iterator

from dlkit import wire


class KernelLost(BaseException):
    """The kernel died, or ran past the time left and ignored the interrupt: no test after this one can run."""


class IgnoredInterrupt(KernelLost):
    """A call ran past the time the test had left, and the kernel did not answer the interrupt: it was killed."""


class CallTimedOut(BaseException):
    """A call into the student's code ran past the time the test had left (the kernel was interrupted)."""


class RefusedReply(BaseException):
    """The kernel's reply was not a message of the kit's format: the test fails, whatever it would have caught."""


class StudentError(Exception):
    """The student's code raised an exception that is not one of Python's own (its class stays in the kernel)."""


#: Sends one request's text and returns the reply's text within `timeout` seconds (GuardedExecute's kernel); calls of
#: the judge's functions that arrive meanwhile are answered with the link's `answer_callback`.
Transport = Callable[[str, float, Callable[[str], str]], str]


class Remote:
    """An object that lives in the student's kernel: calling it or reading an attribute asks the kernel.

    Usable Remotes are the notebook's own definitions (its functions and classes, found by name), their
    attributes, and objects built by calling one of its classes. What a student's function *returns* that
    is not plain data is opaque: any use of it (a method, `len`, truth, arithmetic) raises TypeError, since
    its methods would answer with the student's code (`got.min()` of an object whose `min` lies). A value a
    test checks must come back as a number, an array or a tensor.
    """

    __slots__ = ("_link", "_key", "_type", "_callable", "_usable", "_class")

    def __init__(self, link: "KernelLink", key: int, type_name: str, is_callable: bool, *, usable: bool = True,
                 is_class: bool = False) -> None:
        self._link, self._key, self._type, self._callable = link, key, type_name, is_callable
        self._usable, self._class = usable, is_class

    def _use(self) -> None:
        if not self._usable:
            raise TypeError(f"the submission returned a {self._type}, not a value the grader can check "
                            "(a number, a string, a NumPy array or a torch tensor)")

    def __call__(self, *args, **kwargs):
        self._use()
        if not self._callable:
            raise TypeError(f"'{self._type}' object is not callable")
        return self._link.call(self, args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        self._use()
        return self._link.getattr(self, name)

    def __len__(self) -> int:
        self._use()
        return self._link.call(self, (), {}, method="__len__")

    def __getitem__(self, key):
        self._use()
        return self._link.call(self, (key,), {}, method="__getitem__")

    def __bool__(self) -> bool:
        self._use()
        return True

    def __repr__(self) -> str:
        return f"<a {self._type} in the student's kernel>"


def _exception(record: Any) -> Exception:
    """The student's exception as one the test can catch: Python's own class by name, else StudentError."""
    if not isinstance(record, dict):
        return StudentError("the student's code raised an exception")
    name, text = str(record.get("type", "Exception"))[:100], str(record.get("message", ""))[:4000]
    import builtins

    builtin = record.get("builtin") is True
    kind = getattr(builtins, name if builtin else str(record.get("base", ""))[:100], None)
    if isinstance(kind, type) and issubclass(kind, Exception) and kind is not Exception:
        try:
            return kind(text if builtin or kind.__name__ == name else f"{name}: {text}")
        except Exception:  # an exception class whose constructor wants other arguments (UnicodeDecodeError)
            pass
    return StudentError(f"{name}: {text}" if text else name)


def _no_state_left(reply: dict, who: str) -> None:
    """Fail the test whose call (or backward) the kernel reports leaving global state changed (agent.py's
    left_state: torch's default dtype, a global generator reseeded, TensorFlow's eager mode...). The kernel has
    put back what it could; every later call would have met it."""
    left = reply.get("left_state") or []
    if type(left) is not list or not all(type(what) is str for what in left):
        raise RefusedReply("the kernel's reply was not plain data: global state")
    if left:
        changes = "; ".join(what[:200] for what in left[:3])
        fix = ("draw from a generator of your own (torch.Generator(), np.random.default_rng(seed)), or seed with the "
               "seed you are given" if all("it was not given" in what for what in left) else
               "write files only at the paths you are given" if all("arguments names" in what for what in left) else
               "restore what you change, e.g. with a context manager")
        raise AssertionError(f"{who} changed global state and did not put it back ({changes}): {fix}")


class KernelLink:
    """Requests to one kernel, and what the judge keeps of the device a check is running on."""

    def __init__(self, transport: Transport, timeout: Callable[[], float]) -> None:
        self._transport, self._timeout = transport, timeout
        self.place: tuple[str, str] | None = None
        self.callbacks: dict[int, Callable] = {}  # the judge's functions passed to student code, by number
        self._numbers = itertools.count(1)
        self.requests = 0  # sent so far (the worker's log reports them per test)

    @contextlib.contextmanager
    def placed(self, kind: str, framework: str) -> Iterator[None]:
        """Calls inside this block run in the kernel under the same placement as the judge's check (ondevice.py)."""
        saved, self.place = self.place, (kind, framework)
        try:
            yield
        finally:
            self.place = saved

    def request(self, message: dict) -> dict:
        self.requests += 1
        timeout = self._timeout()
        if timeout <= 0:
            raise CallTimedOut("the test ran past its time limit")
        text = self._transport(wire.dumps(message), timeout, self.answer_callback)
        try:
            reply = wire.loads(text)
        except wire.WireError as err:
            raise RefusedReply(f"the kernel's reply was not plain data: {err}") from None
        if "error" in reply:
            raise RefusedReply(f"the kernel could not answer the grader: {str(reply['error'])[:500]}")
        return reply

    def decoder(self, autograd: bool = True, usable: bool = True) -> wire.Decoder:
        """A decoder whose handles become Remotes: usable ones for names and attributes, opaque ones for what
        student code computed (a value the test needs must come back as plain data)."""
        return wire.Decoder(resolve=lambda record: Remote(
            self, int(record.get("v", 0)), str(record.get("type"))[:200], record.get("callable") is True,
            usable=usable, is_class=record.get("class") is True), autograd=autograd)

    def decode(self, data: Any, usable: bool = True) -> Any:
        try:
            return self.decoder(usable=usable).decode(data)
        except (wire.WireError, ValueError, TypeError, RuntimeError) as err:
            raise RefusedReply(f"the kernel's reply was not plain data: {err}") from None

    def begin(self, seed: int, names: list[str]) -> dict[str, dict]:
        """Start a test in the kernel (one request): seed it with `seed`, and say what each name is in the
        notebook: {"module": name}, {"value": decoded} or {"missing": True}."""
        found = self.request({"op": "begin", "seed": int(seed), "names": names}).get("names")
        if not isinstance(found, dict):
            raise RefusedReply("the kernel's reply was not plain data: no names")
        out = {}
        for name in names:
            entry = found.get(name)
            if not isinstance(entry, dict):
                raise RefusedReply(f"the kernel's reply was not plain data: nothing for {name}")
            out[name] = {"value": self.decode(entry["value"])} if "value" in entry else entry
        return out

    def call(self, target: Remote, args: tuple, kwargs: dict, *, method: str | None = None,
             watch: str | None = None, name: str = "") -> Any:
        """Call a function (or a method) of the kernel's with `args`, as the test would have called it there.

        Arguments go by value; those the call changed in place come back and are written into the judge's own
        objects, so a test sees an argument its call overwrote. Where an argument requires grad, the result is
        linked into the judge's autograd graph: backpropagating through it asks the kernel for the call's input
        gradients (the student's backward runs there). Returns the decoded result (with `watch`: (result, what
        was observed)); the student's exception is raised as such. What the call returns that is not plain data
        comes back opaque (see Remote), unless the callee is a class: a constructed object may be used.
        """
        encoder = wire.Encoder(handle=self._handle_of)
        try:
            sent_args, sent_kwargs = encoder.encode(list(args)), encoder.encode(dict(kwargs))
        except wire.WireError as err:
            raise TypeError(f"the judge cannot send this argument to the kernel: {err}") from None
        inputs = wire.requiring_grad(encoder.kept)
        graph = bool(inputs) and watch is None and _grad_enabled()
        message = {"op": "call", "target": target._key, "args": sent_args, "kwargs": sent_kwargs,
                   "place": list(self.place) if self.place else None, "watch": watch, "name": name, "graph": graph}
        if method:
            message["method"] = method
        reply = self.request(message)
        if "raised" in reply:
            raise _exception(reply["raised"])
        if "ok" not in reply:
            raise RefusedReply("the kernel's reply was not plain data: no result")
        self._write_back(args, reply)
        _no_state_left(reply, name or "a function of the submission")
        usable = target._class and not method
        same = reply.get("same_as_arg")
        if type(same) is int and 0 <= same < len(args):
            result = args[same]
        elif graph:
            result = self._linked(reply, inputs, usable)
        else:
            result = self.decode(reply["ok"], usable)
        if watch == "ops":
            ops = reply.get("ops")
            if type(ops) is not int:
                raise RefusedReply("the kernel's reply was not plain data: no operation count")
            return result, ops
        if watch == "functions":
            names = reply.get("functions")
            if type(names) is not list or not all(type(n) is str for n in names):
                raise RefusedReply("the kernel's reply was not plain data: no function names")
            return result, set(names)
        return result

    def _write_back(self, args: tuple, reply: dict) -> None:
        changed, moved = reply.get("changed") or {}, reply.get("new_storage") or []
        if not isinstance(changed, dict) or not isinstance(moved, list):
            raise RefusedReply("the kernel's reply was not plain data: changed arguments")
        for index, value in changed.items():
            if str(index).isdigit() and int(index) < len(args):
                write_back(args[int(index)], self.decode(value), new_storage=int(index) in moved)

    def _linked(self, reply: dict, inputs: list, usable: bool) -> Any:
        """The result of a call through which the test may backpropagate: its tensors that carry the student's
        graph become outputs of one autograd node in the judge, whose backward asks the kernel."""
        decoder = self.decoder(autograd=False, usable=usable)
        try:
            result = decoder.decode(reply["ok"])
        except (wire.WireError, ValueError, TypeError, RuntimeError) as err:
            raise RefusedReply(f"the kernel's reply was not plain data: {err}") from None
        outputs, key = decoder.wanted_grad, reply.get("graph")
        if outputs and type(key) is int:
            _through_kernel(self, key, outputs, inputs)
        return result

    def define(self, source: str, name: str) -> "Remote":
        """A function of the test's, defined in the kernel from its source (dlkit.in_kernel), to call there."""
        found = self.decode(self.request({"op": "define", "source": source, "name": name}).get("ok"))
        if not isinstance(found, Remote):
            raise RefusedReply("the kernel's reply was not plain data: no function")
        return found

    def backward(self, key: int, grads: tuple) -> list:
        """The gradients of a kept call's inputs for `grads` of its outputs, computed in the kernel."""
        reply = self.request({"op": "backward", "graph": key, "grads": wire.Encoder().encode(list(grads)),
                              "place": list(self.place) if self.place else None})
        if "raised" in reply:
            raise _exception(reply["raised"])
        self._write_back(grads, reply)  # a backward that wrote into its grad_output did so here too
        _no_state_left(reply, "the submission's backward")
        found = self.decode(reply.get("ok"))
        if type(found) is not list:
            raise RefusedReply("the kernel's reply was not plain data: no gradients")
        return found

    def _handle_of(self, value: Any) -> dict:
        """A Remote goes back to the kernel as its handle, a function of the judge's as a callback number."""
        if isinstance(value, Remote):
            return {"t": "handle", "v": value._key}
        if callable(value):
            key = next(self._numbers)  # never reused: a number an earlier test handed out stays dead
            self.callbacks[key] = value
            return {"t": "handle", "v": key, "callback": True}
        raise wire.WireError(f"a {type(value).__qualname__} is not plain data")

    def answer_callback(self, text: str) -> str:
        """Run one of the judge's functions on the arguments the kernel sent; the reply's text (a wire message).

        The arguments are plain data from the student's process, so the function (the test's own) runs here on
        values, never on objects of theirs; whatever it raises goes back to the student's code as an exception.
        """
        try:
            request = wire.loads(text)
            fn = self.callbacks[int(request.get("callback"))]
            args = self.decode(request.get("args", []), usable=False)
            kwargs = self.decode(request.get("kwargs", {"t": "dict", "v": []}), usable=False)
            if type(args) is not list or type(kwargs) is not dict:
                raise wire.WireError("a call's arguments are a list and a dict")
        except (wire.WireError, KeyError, ValueError, TypeError, RefusedReply) as err:
            why = f"the grader refused the call: {err}"[:500]
            return wire.dumps({"raised": {"type": "ValueError", "message": why}})
        try:
            result = fn(*args, **kwargs)
            return wire.dumps({"ok": wire.Encoder(handle=self._handle_of).encode(result)})
        except Exception as err:
            return wire.dumps({"raised": {"type": type(err).__name__, "message": str(err)[:4000]}})

    def getattr(self, target: Remote, name: str) -> Any:
        reply = self.request({"op": "getattr", "target": target._key, "name": name})
        if "raised" in reply:
            raise _exception(reply["raised"])
        return self.decode(reply.get("ok"), usable=target._usable)


def write_back(local: Any, changed: Any, new_storage: bool = False) -> None:
    """Make the judge's argument what the call left in the kernel: its values (in new storage where the call gave
    the argument new storage, as `w.data = ...` does), requires_grad and grad."""
    import numpy as np

    if isinstance(local, np.ndarray) and isinstance(changed, np.ndarray):
        if local.shape == changed.shape:
            writeable = local.flags.writeable
            local.flags.writeable = True
            np.copyto(local, changed, casting="unsafe")
            local.flags.writeable = writeable
        return
    if isinstance(local, list) and isinstance(changed, list):
        local[:] = changed
        return
    if isinstance(local, dict) and isinstance(changed, dict):
        local.clear()
        local.update(changed)
        return
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(local, torch.Tensor) or not isinstance(changed, torch.Tensor):
        return
    with torch.no_grad():
        if new_storage and local.dtype == changed.dtype:
            local.data = changed.detach().clone()
        elif local.shape == changed.shape and local.dtype == changed.dtype:
            local.copy_(changed)
    if local.is_leaf:
        if local.requires_grad != changed.requires_grad and (local.is_floating_point() or not changed.requires_grad):
            local.requires_grad_(changed.requires_grad)
        local.grad = changed.grad if changed.is_leaf else None


def _grad_enabled() -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and torch.is_grad_enabled()


def _through_kernel(link: KernelLink, key: int, outputs: list, inputs: list) -> None:
    """Make `outputs` (decoded, not requiring grad) the outputs of one autograd node over `inputs`, whose backward
    is the kernel's call `key`: backward() in the test then runs the student's own backward, in their kernel."""
    import torch

    class ThroughKernel(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *tensors):
            return tuple(outputs)

        @staticmethod
        def backward(ctx, *grads):
            found = link.backward(key, grads)
            if len(found) != len(inputs):
                raise RefusedReply("the kernel's reply was not plain data: gradients for other inputs")
            return tuple(found)

    linked = ThroughKernel.apply(*inputs)
    for output, made in zip(outputs, linked if isinstance(linked, tuple) else (linked,)):
        if made is not output:  # autograd handed back new tensors: take their graph into the decoded ones
            raise RefusedReply("the judge could not link the result into its autograd graph")
