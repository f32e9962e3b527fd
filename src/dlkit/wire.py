"""Plain data between the judge and a student's kernel: numbers, strings, arrays as raw bytes, nothing that runs.

The grader's judge (autograder/judge/) holds the reference and the verdicts; the student's kernel
only runs the student's code on the inputs the judge sends and sends back what it returned. Both
directions go through this codec, so nothing either side receives can run code on decoding:

- JSON (strict: no NaN literals, no duplicate keys) whose objects are tagged values ("t");
- NumPy arrays and scalars and torch tensors as base64 raw bytes with dtype, shape and device, from
  an allowlist of numeric dtypes, their length checked against dtype and shape before any copy;
- exact types only: a subclass of int, float, str, ndarray or Tensor (one whose `==`, `__array__` or
  `__float__` could lie) is never sent by value. The kernel sends it as a *handle*, a number naming
  an object that stays in the kernel; the judge can only ask the kernel about it.

Torch tensors keep their dtype, shape, strides (transposed views arrive transposed), device
(cpu, cuda:N, mps, xla, or "fakegpu", the simulated accelerator), requires_grad, whether they
are leaves or nn.Parameters, and their `.grad`. Within one message an object sent twice arrives
as one object (`{"t": "ref"}`), so `f(x, x)` and a function that returns its argument are seen as such.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any, Callable

import numpy as np

#: The most bytes of one message, and of one array in it; a larger reply is refused, never decoded.
MAX_MESSAGE_BYTES = 256 * 2**20
#: A view (transposed, every other entry) arrives as such when the memory it spans is at most this many times its
#: size: a function that reads a view's memory as if it were contiguous is then graded as it would run.
MAX_VIEW_SPAN = 64
#: Deepest nesting of lists, tuples and dicts in a message.
MAX_DEPTH = 32
#: NumPy dtype kinds sent by value: bool, signed and unsigned integers, floats, complex.
_NUMERIC_KINDS = "biufc"
_TORCH_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16", "float32", "float64",
                 "complex64", "complex128")
#: NumPy scalar types sent by value (np.int64(3) stays an np.int64: the contract may say `int`).
_NUMPY_SCALARS = (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
                  np.float16, np.float32, np.float64, np.complex64, np.complex128)


class WireError(ValueError):
    """A message that is not plain data of the kit's format: refused whole."""


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: Any, expected: int) -> bytes:
    if not isinstance(text, str) or len(text) > 4 * (expected // 3 + 2):
        raise WireError("array data of the wrong length")
    raw = base64.b64decode(text.encode("ascii"), validate=True)
    if len(raw) != expected:
        raise WireError(f"array data has {len(raw)} bytes, its dtype and shape need {expected}")
    return raw


def _shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) > 64 or not all(type(n) is int and 0 <= n for n in value):
        raise WireError("a shape is a list of at most 64 non-negative ints")
    size = math.prod(value)
    if size > MAX_MESSAGE_BYTES:
        raise WireError("an array larger than a message may be")
    return tuple(value)


def _view_strides(shape: tuple[int, ...], strides: Any) -> tuple[int, ...] | None:
    """`strides` (in elements) if they describe a view of other memory worth rebuilding: positive, one per axis,
    no two entries sharing memory, spanning at most MAX_VIEW_SPAN times the view's own size (a transposed or
    every-other-entry view of a larger array); None otherwise, and for a view that is dense in row order."""
    if not isinstance(strides, list) or len(strides) != len(shape) or 0 in shape:
        return None
    if not all(type(s) is int and s > 0 for s in strides):
        return None
    reach = 1
    for size, stride in sorted(zip(shape, strides), key=lambda pair: pair[1]):
        if size > 1 and stride < reach:
            return None  # entries would overlap
        reach = max(reach, stride * size) if size > 1 else reach
    dense = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    span = 1 + sum((size - 1) * stride for size, stride in zip(shape, strides))
    if [s for n, s in zip(shape, strides) if n > 1] == [s for n, s in zip(shape, dense) if n > 1]:
        return None
    return tuple(strides) if span <= min(MAX_VIEW_SPAN * math.prod(shape), MAX_MESSAGE_BYTES // 16) else None


def _np_dtype(name: Any) -> np.dtype:
    try:
        dtype = np.dtype(str(name))
    except TypeError as err:
        raise WireError(f"unknown dtype {name!r}") from err
    if dtype.kind not in _NUMERIC_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise WireError(f"dtype {name!r} is not a plain numeric dtype")
    return dtype.newbyteorder("=")


def _torch():
    import torch

    return torch


class Encoder:
    """Turns one message's values into tagged JSON; `handle` decides what to do with anything else."""

    def __init__(self, handle: Callable[[Any], dict] | None = None) -> None:
        self._handle = handle
        self._seen: dict[int, int] = {}
        self._keep: list[Any] = []  # keeps memoised objects alive, so their ids stay unique for this message

    def encode(self, value: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise WireError(f"nested deeper than {MAX_DEPTH}")
        kind = type(value)
        if value is None or kind in (bool, str):
            return value
        if kind is int:
            return value if abs(value) < 2**53 else {"t": "int", "v": str(value)}
        if kind is float:
            return value if math.isfinite(value) else {"t": "float", "v": repr(value)}
        if kind is complex:
            return {"t": "complex", "v": [self.encode(value.real), self.encode(value.imag)]}
        if kind is bytes:
            return {"t": "bytes", "v": _b64(value)}
        if id(value) in self._seen:
            return {"t": "ref", "v": self._seen[id(value)]}
        if kind is list:
            self._remember(value)
            return [self.encode(item, depth + 1) for item in value]
        if kind is tuple:
            self._remember(value)
            return {"t": "tuple", "v": [self.encode(item, depth + 1) for item in value]}
        if kind is dict:
            self._remember(value)
            pairs = [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in value.items()]
            return {"t": "dict", "v": pairs}
        if kind is slice:
            return {"t": "slice", "v": [self.encode(value.start), self.encode(value.stop), self.encode(value.step)]}
        if value is Ellipsis:
            return {"t": "ellipsis"}
        if kind is np.ndarray and value.dtype.kind in _NUMERIC_KINDS and value.dtype.fields is None:
            self._remember(value)
            order = "F" if value.flags.f_contiguous and not value.flags.c_contiguous else "C"
            data = np.ascontiguousarray(value.T if order == "F" else value)
            record = {"t": "ndarray", "dtype": value.dtype.newbyteorder("=").str, "shape": list(value.shape),
                      "order": order, "writeable": bool(value.flags.writeable),
                      "data": _b64(data.astype(data.dtype.newbyteorder("="), copy=False).tobytes())}
            if not value.flags.c_contiguous and not value.flags.f_contiguous and value.size:
                if all(s % value.itemsize == 0 for s in value.strides):
                    record["strides"] = [s // value.itemsize for s in value.strides]
            return record
        if kind in _NUMPY_SCALARS:
            return {"t": "npscalar", "dtype": value.dtype.str, "data": _b64(value.tobytes())}
        if kind is np.dtype and value.kind in _NUMERIC_KINDS:
            return {"t": "np_dtype", "v": value.str}
        if kind is type and value in _NUMPY_SCALARS:
            return {"t": "np_type", "v": np.dtype(value).name}
        if kind is type and value in (int, float, bool, complex, str, list, tuple, dict):
            return {"t": "builtin_type", "v": value.__name__}
        tensor = self._tensor(value, depth)
        if tensor is not None:
            return tensor
        if self._handle is None:
            raise WireError(f"a {kind.__module__}.{kind.__qualname__} is not plain data")
        return self._handle(value)

    @property
    def kept(self) -> list:
        """The lists, tuples, dicts, arrays and tensors encoded so far, in the order met (the decoder's order)."""
        return list(self._keep)

    def _remember(self, value: Any) -> None:
        """Number an object as the decoder will (in the order first met), so a second meeting sends a reference."""
        self._seen[id(value)] = len(self._seen)
        self._keep.append(value)

    def _tensor(self, value: Any, depth: int) -> dict | None:
        """A torch tensor, dtype or device as tagged JSON; None for anything else (torch need not be imported)."""
        import sys

        torch = sys.modules.get("torch")
        if torch is None:
            return None
        if type(value) is torch.dtype:
            return {"t": "torch_dtype", "v": str(value).replace("torch.", "")}
        if type(value) is torch.device:
            return {"t": "torch_device", "v": str(value)}
        fake = type(value).__name__ == "FakeGpuTensor" and type(value).__module__ == "dlkit.fakegpu"
        if type(value) not in (torch.Tensor, torch.nn.Parameter) and not fake:
            return None
        name = str(value.dtype).replace("torch.", "")
        if name not in _TORCH_DTYPES:
            return None
        self._remember(value)
        data = value.elem if fake else value
        host = data.detach().to("cpu").resolve_conj().resolve_neg().contiguous()
        if name == "bfloat16":
            host = host.view(torch.int16)
        grad = value.grad if value.is_leaf else None
        return {"t": "tensor", "dtype": name, "shape": list(value.shape), "stride": list(data.stride()),
                "device": "fakegpu" if fake else str(value.device), "requires_grad": bool(value.requires_grad),
                "leaf": bool(value.is_leaf), "parameter": type(value) is torch.nn.Parameter,
                "grad": None if grad is None else self.encode(grad, depth + 1),
                "data": _b64(host.numpy().tobytes())}


class Decoder:
    """Turns tagged JSON back into values; `resolve` turns a handle record into whatever stands for it."""

    def __init__(self, resolve: Callable[[dict], Any] | None = None, autograd: bool = True) -> None:
        self._resolve = resolve
        self._seen: list[Any] = []
        self._autograd = autograd
        #: With autograd=False: the tensors that were sent requiring grad, decoded without (for the judge's own link).
        self.wanted_grad: list[Any] = []

    @property
    def decoded(self) -> list:
        """The lists, tuples, dicts, arrays and tensors decoded so far, in the order sent."""
        return list(self._seen)

    def decode(self, data: Any, depth: int = 0) -> Any:
        """The value `data` stands for; anything malformed in it raises WireError, whatever failed underneath."""
        if depth:
            return self._decode(data, depth)
        try:
            return self._decode(data, depth)
        except WireError:
            raise
        except (ValueError, TypeError, RuntimeError, OverflowError, KeyError, AttributeError, MemoryError) as err:
            raise WireError(f"{type(err).__name__}: {err}") from None

    def _decode(self, data: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise WireError(f"nested deeper than {MAX_DEPTH}")
        if data is None or type(data) in (bool, str, int, float):
            return data
        if type(data) is list:
            out: list = []
            self._seen.append(out)
            out.extend(self.decode(item, depth + 1) for item in data)
            return out
        if type(data) is not dict or not isinstance(data.get("t"), str):
            raise WireError("an object without its type tag")
        tag, value = data["t"], data.get("v")
        if tag == "ref":
            if type(value) is not int or not 0 <= value < len(self._seen):
                raise WireError("a reference to nothing sent before")
            return self._seen[value]
        if tag == "int":
            return int(str(value))
        if tag == "float":
            if value not in ("nan", "inf", "-inf"):
                raise WireError("a non-finite float is nan, inf or -inf")
            return float(value)
        if tag == "complex":
            real, imag = (self.decode(part, depth + 1) for part in value)
            return complex(real, imag)
        if tag == "bytes":
            return base64.b64decode(str(value).encode("ascii"), validate=True)
        if tag == "tuple":
            slot = self._reserve()
            items = tuple(self.decode(item, depth + 1) for item in _list(value))
            self._seen[slot] = items
            return items
        if tag == "dict":
            out_dict: dict = {}
            self._seen.append(out_dict)
            for pair in _list(value):
                if type(pair) is not list or len(pair) != 2:
                    raise WireError("a dict entry is a [key, value] pair")
                out_dict[self.decode(pair[0], depth + 1)] = self.decode(pair[1], depth + 1)
            return out_dict
        if tag == "slice":
            return slice(*(self.decode(part, depth + 1) for part in _list(value)))
        if tag == "ellipsis":
            return Ellipsis
        if tag == "ndarray":
            slot = self._reserve()
            dtype, shape = _np_dtype(data.get("dtype")), _shape(data.get("shape"))
            order = data.get("order")
            flat = np.frombuffer(_unb64(data.get("data"), math.prod(shape) * dtype.itemsize), dtype=dtype)
            array = flat.reshape(shape[::-1]).T.copy(order="F") if order == "F" else flat.reshape(shape).copy()
            strides = _view_strides(shape, data.get("strides")) if "strides" in data else None
            if strides is not None:  # a view of other memory, rebuilt over zeros it does not show
                span = 1 + sum((n - 1) * s for n, s in zip(shape, strides))
                view = np.lib.stride_tricks.as_strided(np.zeros(span, dtype), shape,
                                                       [s * dtype.itemsize for s in strides])
                view[...] = array
                array = view
            if data.get("writeable") is False:
                array.flags.writeable = False
            self._seen[slot] = array
            return array
        if tag == "npscalar":
            dtype = _np_dtype(data.get("dtype"))
            return np.frombuffer(_unb64(data.get("data"), dtype.itemsize), dtype=dtype)[0]
        if tag == "np_dtype":
            return _np_dtype(value)
        if tag == "np_type":
            return _np_dtype(value).type
        if tag == "builtin_type":
            types = {t.__name__: t for t in (int, float, bool, complex, str, list, tuple, dict)}
            if value not in types:
                raise WireError(f"not a plain type: {value!r}")
            return types[value]
        if tag == "torch_dtype":
            if value not in _TORCH_DTYPES:
                raise WireError(f"unknown torch dtype {value!r}")
            return getattr(_torch(), value)
        if tag == "torch_device":
            return _torch().device(str(value))
        if tag == "tensor":
            return self._tensor(data, depth)
        if tag == "handle":
            if self._resolve is None:
                raise WireError("a handle where only plain data may come")
            return self._resolve(data)
        raise WireError(f"unknown type tag {tag!r}")

    def _reserve(self) -> int:
        self._seen.append(None)
        return len(self._seen) - 1

    def _tensor(self, data: dict, depth: int):
        torch = _torch()
        slot = self._reserve()
        name = data.get("dtype")
        if name not in _TORCH_DTYPES:
            raise WireError(f"unknown torch dtype {name!r}")
        shape = _shape(data.get("shape"))
        dtype = getattr(torch, name)
        carrier = torch.int16 if name == "bfloat16" else dtype
        itemsize = torch.empty((), dtype=carrier).element_size()
        raw = _unb64(data.get("data"), math.prod(shape) * itemsize)
        host = torch.frombuffer(bytearray(raw), dtype=carrier) if raw else torch.empty(0, dtype=carrier)
        host = host.view(dtype).reshape(shape) if name == "bfloat16" else host.reshape(shape)
        stride = _view_strides(shape, data.get("stride"))
        if stride is not None:  # a transposed or strided view of other memory, rebuilt over zeros it does not show
            span = 1 + sum((n - 1) * s for n, s in zip(shape, stride))
            host = torch.zeros(span, dtype=dtype).as_strided(shape, stride).copy_(host)
        device = str(data.get("device"))
        if device == "fakegpu":
            from dlkit.fakegpu import FakeGpuTensor

            tensor = FakeGpuTensor(host)
        elif device == "cpu":
            tensor = host
        elif stride is not None:  # `.to` would make a view with gaps contiguous
            span = 1 + sum((n - 1) * s for n, s in zip(shape, stride))
            tensor = torch.zeros(span, dtype=dtype, device=torch.device(device)).as_strided(shape, stride).copy_(host)
        else:
            tensor = host.to(torch.device(device))
        if data.get("parameter") is True:
            tensor = torch.nn.Parameter(tensor, requires_grad=data.get("requires_grad") is True)
        elif data.get("requires_grad") is True and not self._autograd:
            self.wanted_grad.append(tensor)
        elif data.get("requires_grad") is True:
            if not tensor.is_floating_point() and not tensor.is_complex():
                raise WireError("only floating-point tensors can require gradients")
            tensor.requires_grad_()
            if data.get("leaf") is False:
                tensor = tensor.clone()  # a non-leaf, as it was: a result of operations, not a parameter
        self._seen[slot] = tensor
        if data.get("grad") is not None:
            grad = self.decode(data["grad"], depth + 1)
            if tensor.is_leaf:
                tensor.grad = grad
        return tensor


def requiring_grad(values: list) -> list:
    """The torch tensors among `values` that require grad, in order (the inputs and outputs of a call's graph)."""
    import sys

    torch = sys.modules.get("torch")
    return [v for v in values if torch is not None and isinstance(v, torch.Tensor) and v.requires_grad]


def _list(value: Any) -> list:
    if type(value) is not list:
        raise WireError("expected a list")
    return value


def dumps(message: dict) -> str:
    """A message as one line of JSON text."""
    return json.dumps(message, allow_nan=False, separators=(",", ":"))


def _no_duplicates(pairs: list) -> dict:
    keys = [key for key, _ in pairs]
    if len(keys) != len(set(keys)):
        raise WireError("a JSON object with a key twice")
    return dict(pairs)


def _no_constants(name: str):
    raise WireError(f"{name} is not JSON")


def loads(text: Any) -> dict:
    """A message from its JSON text; anything else raises WireError, whatever the text holds."""
    if not isinstance(text, str):
        raise WireError("a message is text")
    if len(text) > MAX_MESSAGE_BYTES * 4 // 3 + 1024:
        raise WireError(f"a message of {len(text)} characters, over the {MAX_MESSAGE_BYTES} byte limit")
    try:
        message = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except (ValueError, RecursionError) as err:
        raise WireError(f"not a message: {err}") from None
    if type(message) is not dict:
        raise WireError("a message is a JSON object")
    return message
