"""A simulated accelerator, device kind "fakegpu", so that device bugs can be tested on a CPU-only machine.

Graders and CI rarely have a GPU, yet the bugs students make with devices only show on one: a
tensor created without `device=` meets a CUDA tensor and raises "Expected all tensors to be on
the same device", and `.numpy()` refuses a CUDA tensor. Inside `active()` torch behaves as if a CUDA
GPU were attached whose tensors report the device `meta`: they hold real data on the CPU (so values
can be checked), but

- an operation mixing them with a CPU tensor of one or more dimensions raises like CUDA
  (0-dim CPU tensors and CPU index tensors are allowed, as on CUDA);
- `.numpy()` and `np.asarray` refuse them like CUDA tensors; `.numpy(force=True)` copies to the host
  as it does on CUDA.

It accepts everything a CUDA device accepts from correct code, and nothing more is refused: float64
works, as on CUDA and Colab's GPUs. A rule beyond CUDA's (no float64, as on TPUs and Apple GPUs) is
checked by the hidden tests themselves where the exercise's text states it (dlkit.assert_no_float64),
on every machine alike, so a grade never depends on the grader's hardware.

Why not PrivateUse1, torch's own hook for out-of-tree devices: without a C++ device guard an
autograd graph on such a device aborts the process. `meta` has a guard in every torch build, and
real meta tensors never reach student code here because every factory call inside `active()`
is served with data. The simulation is enabled only on request (DLKIT_DEVICES=cpu,fakegpu),
never by "auto": it is a test device, not hardware.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

#: The torch device that simulated tensors report.
DEVICE = torch.device("meta")

_aten = torch.ops.aten
# Operations CUDA accepts with CPU tensors among their arguments: copies and CPU index tensors.
_MIXING_ALLOWED = {_aten.copy_.default, _aten._to_copy.default, _aten.index.Tensor, _aten.index_put_.default,
                   _aten.index_put.default, _aten._index_put_impl_.default}


# Factories that copy Python or NumPy data straight into the target device's memory.
_DATA_FACTORIES = {torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor}


class FakeGpuTensor(torch.Tensor):
    """A tensor on the simulated accelerator: reports `meta` as its device, keeps its data in `elem`."""

    elem: torch.Tensor

    @staticmethod
    def __new__(cls, elem: torch.Tensor) -> "FakeGpuTensor":
        tensor = torch.Tensor._make_wrapper_subclass(cls, elem.shape, strides=elem.stride(), dtype=elem.dtype,
                                                     device=DEVICE, requires_grad=elem.requires_grad)
        tensor.elem = elem
        return tensor

    def numpy(self, *, force: bool = False):
        if force:  # as on CUDA: detach, copy to host memory, then NumPy (a copy, never a view of the device's data)
            return self.elem.detach().clone().resolve_conj().resolve_neg().numpy()
        raise TypeError("can't convert meta device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                        "to host memory first.")

    def __array__(self, *args, **kwargs):
        return self.numpy()

    def __repr__(self, *, tensor_contents=None) -> str:
        return f"{self.elem!r} (on the simulated accelerator, device='meta')"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        """Operations on simulated tensors outside `active()` (e.g. a tensor a test kept) still work."""
        with FakeGpuMode():
            return func(*args, **(kwargs or {}))


def _device_of(tensor: torch.Tensor) -> str:
    return "meta" if isinstance(tensor, FakeGpuTensor) else str(tensor.device)


def _tensors_in(values) -> list[torch.Tensor]:
    """The tensors among an aten operation's arguments, found in its lists and tuples (Tensor[], Tensor?[]):
    a plain walk, a third of the time torch's general tree walk takes per operation."""
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(_tensors_in(value))
    return found


def _map_nested(fn, value):
    """`fn` applied to a value, or to each value in its lists and tuples (an aten op's argument or result)."""
    if isinstance(value, list):
        return [_map_nested(fn, item) for item in value]
    if isinstance(value, tuple):
        items = [_map_nested(fn, item) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    return fn(value)


def _unwrapped(value):
    return value.elem if isinstance(value, FakeGpuTensor) else value


class FakeGpuMode(TorchDispatchMode):
    """Serves every torch operation: checks placement like CUDA, computes on the CPU data, wraps results."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        tensors = _tensors_in((*args, *kwargs.values()))
        on_fake = any(isinstance(t, FakeGpuTensor) for t in tensors)
        if on_fake and func not in _MIXING_ALLOWED:
            others = sorted({_device_of(t) for t in tensors if not isinstance(t, FakeGpuTensor) and t.dim() > 0})
            if others:
                raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two "
                                   f"devices, meta and {others[0]}! (device meta is the simulated accelerator)")
        to_fake = on_fake
        if kwargs.get("device") is not None:
            to_fake = torch.device(kwargs["device"]).type == DEVICE.type
            if to_fake:
                kwargs["device"] = torch.device("cpu")
        if on_fake:
            args = tuple(_map_nested(_unwrapped, value) for value in args)
            kwargs = {key: _map_nested(_unwrapped, value) for key, value in kwargs.items()}
        out = func(*args, **kwargs)
        if not to_fake or func is _aten._local_scalar_dense.default:
            return out
        # An in-place operation returns its input's data: hand back that very wrapper, as torch would.
        wrappers = {id(t.elem): t for t in tensors if isinstance(t, FakeGpuTensor)}
        return _map_nested(lambda value: wrappers[id(value)] if id(value) in wrappers else _wrap(value), out)


def _wrap(value):
    """A freshly computed CPU result as a tensor on the simulated accelerator."""
    if not isinstance(value, torch.Tensor) or isinstance(value, FakeGpuTensor):
        return value
    return FakeGpuTensor(value)


class _FactoryMode(TorchFunctionMode):
    """`torch.tensor(data, device=...)` and kin copy their data in C++, past the dispatch mode: build on the
    CPU, then move."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        device = kwargs.get("device")
        if func is torch.Tensor.new_tensor and device is None and isinstance(args[0], FakeGpuTensor):
            device = DEVICE  # new_tensor puts its data on self's device
        if func not in _DATA_FACTORIES or device is None or torch.device(device).type != DEVICE.type:
            return func(*args, **kwargs)
        kwargs["device"] = torch.device("cpu")
        requires_grad = kwargs.pop("requires_grad", False)  # the moved copy, not the CPU original, is the leaf
        return func(*args, **kwargs).to(DEVICE).requires_grad_(requires_grad)


@contextlib.contextmanager
def active() -> Iterator[torch.device]:
    """Within this block torch has a simulated accelerator, `torch.device("meta")`; yields that device."""
    with _FactoryMode(), FakeGpuMode():
        yield DEVICE
