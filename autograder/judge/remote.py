"""The judge's link to a student's kernel: requests out, plain data back (src/dlkit/agent.py answers them).

The judge never receives an object whose methods run: a reply is a wire.py message, decoded into
ints, floats, strings, NumPy arrays and torch tensors built here from raw bytes. What is not plain
data stays in the kernel and arrives as a `Remote`, which the judge can only call or ask about,
each time through the kernel. A kernel that answers with anything else gets a failed test, never
an exception a test could catch and pass over (`RefusedReply` is not an `Exception`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from dlkit import wire


class KernelLost(BaseException):
    """The kernel died, or ran past the time left and ignored the interrupt: no test after this one can run."""


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
    """An object that lives in the student's kernel: calling it or reading an attribute asks the kernel."""

    __slots__ = ("_link", "_key", "_type", "_callable")

    def __init__(self, link: "KernelLink", key: int, type_name: str, is_callable: bool) -> None:
        self._link, self._key, self._type, self._callable = link, key, type_name, is_callable

    def __call__(self, *args, **kwargs):
        if not self._callable:
            raise TypeError(f"'{self._type}' object is not callable")
        return self._link.call(self, args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._link.getattr(self, name)

    def __len__(self) -> int:
        return self._link.call(self, (), {}, method="__len__")

    def __getitem__(self, key):
        return self._link.call(self, (key,), {}, method="__getitem__")

    def __repr__(self) -> str:
        return f"<a {self._type} in the student's kernel>"


def _exception(record: Any) -> Exception:
    """The student's exception as one the test can catch: Python's own class by name, else StudentError."""
    if not isinstance(record, dict):
        return StudentError("the student's code raised an exception")
    name, text = str(record.get("type", "Exception"))[:100], str(record.get("message", ""))[:4000]
    import builtins

    kind = getattr(builtins, name, None)
    if record.get("builtin") is True and isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(text)
        except Exception:  # an exception class whose constructor wants other arguments (UnicodeDecodeError)
            pass
    return StudentError(f"{name}: {text}" if text else name)


class KernelLink:
    """Requests to one kernel, and what the judge keeps of the device a check is running on."""

    def __init__(self, transport: Transport, timeout: Callable[[], float]) -> None:
        self._transport, self._timeout = transport, timeout
        self.place: tuple[str, str] | None = None
        self.callbacks: dict[int, Callable] = {}  # the judge's functions passed to student code, by number

    @contextlib.contextmanager
    def placed(self, kind: str, framework: str) -> Iterator[None]:
        """Calls inside this block run in the kernel under the same placement as the judge's check (ondevice.py)."""
        saved, self.place = self.place, (kind, framework)
        try:
            yield
        finally:
            self.place = saved

    def request(self, message: dict) -> dict:
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

    def decoder(self) -> wire.Decoder:
        return wire.Decoder(resolve=lambda record: Remote(self, int(record.get("v", 0)), str(record.get("type"))[:200],
                                                          record.get("callable") is True))

    def decode(self, data: Any) -> Any:
        try:
            return self.decoder().decode(data)
        except (wire.WireError, ValueError, TypeError, RuntimeError) as err:
            raise RefusedReply(f"the kernel's reply was not plain data: {err}") from None

    def seed(self, seed: int) -> None:
        self.request({"op": "seed", "seed": int(seed)})

    def resolve(self, names: list[str]) -> dict[str, dict]:
        """What each name is in the notebook: {"module": name}, {"value": decoded} or {"missing": True}."""
        found = self.request({"op": "resolve", "names": names}).get("names")
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
        objects, so a test sees an argument its call overwrote. Returns the decoded result (with `watch`:
        (result, what was observed)); the student's exception is raised as such.
        """
        encoder = wire.Encoder(handle=self._handle_of)
        try:
            sent_args, sent_kwargs = encoder.encode(list(args)), encoder.encode(dict(kwargs))
        except wire.WireError as err:
            raise TypeError(f"the judge cannot send this argument to the kernel: {err}") from None
        message = {"op": "call", "target": target._key, "args": sent_args, "kwargs": sent_kwargs,
                   "place": list(self.place) if self.place else None, "watch": watch, "name": name}
        if method:
            message["method"] = method
        reply = self.request(message)
        if "raised" in reply:
            raise _exception(reply["raised"])
        if "ok" not in reply:
            raise RefusedReply("the kernel's reply was not plain data: no result")
        changed = reply.get("changed") or {}
        if not isinstance(changed, dict):
            raise RefusedReply("the kernel's reply was not plain data: changed arguments")
        for index, value in changed.items():
            if str(index).isdigit() and int(index) < len(args):
                write_back(args[int(index)], self.decode(value))
        same = reply.get("same_as_arg")
        result = args[same] if type(same) is int and 0 <= same < len(args) else self.decode(reply["ok"])
        if watch == "ops":
            ops = reply.get("ops")
            if type(ops) is not int:
                raise RefusedReply("the kernel's reply was not plain data: no operation count")
            return result, ops
        return result

    def _handle_of(self, value: Any) -> dict:
        """A Remote goes back to the kernel as its handle, a function of the judge's as a callback number."""
        if isinstance(value, Remote):
            return {"t": "handle", "v": value._key}
        if callable(value):
            key = len(self.callbacks) + 1
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
            args = self.decode(request.get("args", []))
            kwargs = self.decode(request.get("kwargs", {"t": "dict", "v": []}))
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
        return self.decode(reply.get("ok"))

    def release(self) -> None:
        self.request({"op": "release"})




def write_back(local: Any, changed: Any) -> None:
    """Make the judge's argument what the call left in the kernel: its values, requires_grad and grad."""
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
    import sys

    torch = sys.modules.get("torch")
    if torch is None or not isinstance(local, torch.Tensor) or not isinstance(changed, torch.Tensor):
        return
    with torch.no_grad():
        if local.shape == changed.shape and local.dtype == changed.dtype:
            local.copy_(changed)
    if local.is_leaf:
        if local.requires_grad != changed.requires_grad and (local.is_floating_point() or not changed.requires_grad):
            local.requires_grad_(changed.requires_grad)
        local.grad = changed.grad if changed.is_leaf else None
