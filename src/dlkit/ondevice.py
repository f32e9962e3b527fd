"""Run one test's checks on every device, and say on which ones it passed, failed or could not run.

A hidden test hands its checks to `check_on_devices(check)`, which calls `check(kind)` once per
device kind (the CPU always; CUDA, MPS, a TPU when present; see DLKIT_DEVICES). For each kind
it sends one marker on the marker channel (channel.py), shown as the line

    [dlkit-device] {"device": "cuda", "status": "failed", "message": "on cuda: ..."}

(printed, outside a Jupyter kernel), that the grader turns into one results row per device, so a
TA sees *where* a submission breaks and a device the grader lacks is reported as "skipped", never
as passed. The cell still fails as a whole (nbgrader scores test cells all-or-nothing): a failure
on the CPU re-raises the CPU's own exception, exactly as a plain loop would; a failure only on
accelerators raises an AssertionError that names each failing device.
"""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Callable, ContextManager

from . import channel
from .devices import explicit_devices, start_xla, tf_kinds_present, torch_devices, xla_backend, xla_blocked

#: Prefix of the marker's text line.
MARKER = "[dlkit-device] "
#: Longest message a marker carries: enough to locate the error, short enough for a CSV cell.
MAX_MESSAGE = 2000
FRAMEWORKS = ("torch", "tf")


class SkipDevice(Exception):
    """Raised by a check that cannot run on this device kind (DDP off cpu/cuda, export on the simulated GPU).

    The device is then reported "skipped" with this reason: not run is never passed.
    """


def _present(framework: str) -> list[str]:
    """Device kinds this runtime can run `framework` on; the simulated accelerator exists for torch only."""
    if framework == "tf":
        return tf_kinds_present()
    return torch_devices() + ["fakegpu"]


def _kinds_to_visit(kinds: list[str] | None, framework: str,
                    present: list[str] | None = None) -> list[tuple[str, bool]]:
    """(kind, present) in visiting order, the CPU first. "auto" visits what is present and skips nothing.
    `present`: the kinds where the check's code runs, when that is another process (the grader's judge)."""
    present = _present(framework) if present is None else present
    if kinds is None:
        explicit = explicit_devices()
        kinds = explicit if explicit is not None else [k for k in present if k != "fakegpu"]
    ordered = ["cpu"] + [k for k in dict.fromkeys(kinds) if k != "cpu"]
    return [(kind, kind in present) for kind in ordered]


@functools.cache
def tpu_strategy():
    """TensorFlow's TPUStrategy for the local TPU, connected once per process (only when a TPU is present)."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu="local")
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def _placement(kind: str, framework: str) -> ContextManager:
    """The context a check runs in: TF's device scope or TPU strategy, or the simulated accelerator for torch.

    TF's CPU gets an explicit scope only where an accelerator exists (TF would otherwise place ops
    there); on a CPU-only runtime the check runs exactly as the test's code always did.
    """
    if framework == "tf":
        import tensorflow as tf

        if kind == "xla":
            return tpu_strategy().scope()
        if kind == "cuda":
            return tf.device("/GPU:0")
        return tf.device("/CPU:0") if len(tf_kinds_present()) > 1 else contextlib.nullcontext()
    if kind == "fakegpu":
        from . import fakegpu

        return fakegpu.active()
    if kind == "xla":
        return _xla_eager()
    return contextlib.nullcontext()


def _xla_eager() -> ContextManager:
    """torch_xla's eager mode for the duration of a check: every operation runs when it is issued.

    Lazily, a training loop that never marks a step (no `torch_xla.sync()`, as in every device-agnostic
    loop) grows one graph across all its steps and recompiles it at each `.item()`: 30 steps of a tiny
    MLP took 88 s instead of 1.2 s (torch_xla 2.9, CPU backend), past the cell time limit. A check asks
    whether the code is right on the device, not whether it is tuned for lazy tensors (notebook 01
    teaches that); eager mode keeps the device's placement and dtype rules.
    """
    from torch_xla.experimental import eager_mode_context

    return eager_mode_context(True)


def _absence(kind: str, framework: str) -> str:
    """Why `kind` was not run: the message of its "skipped" marker."""
    if kind == "fakegpu" and framework != "torch":
        return f"not run: the simulated fakegpu exists for torch only, not for {framework}"
    if kind == "xla" and framework == "tf" and xla_backend():
        return (f"not run: TensorFlow's xla is TPUStrategy, which needs a TPU; "
                f"this runtime's xla is torch_xla on {xla_backend()}")
    if kind == "xla" and framework == "torch" and xla_backend() and xla_blocked():
        return f"not run: {xla_blocked()}"
    return f"not run: this runtime has no {kind}"


def _emit(kind: str, status: str, message: str = "") -> None:
    """Send one device marker, at once, so that a later crash or timeout cannot lose it."""
    record = {"device": kind, "status": status, "message": message[:MAX_MESSAGE]}
    channel.send({"marker": "device", **record}, MARKER + json.dumps(record))


def _describe(kind: str, err: Exception) -> str:
    """A failure's message prefixed with the device, so a student knows where their code broke."""
    text = str(err).strip()
    if isinstance(err, AssertionError):
        return text if text.startswith(f"on {kind}") else f"on {kind}: {text or 'a check failed'}"
    return f"on {kind}: {type(err).__name__}: {text}" if text else f"on {kind}: {type(err).__name__}"


def check_on_devices(check: Callable[[str], None], kinds: list[str] | None = None,
                     framework: str = "torch") -> dict[str, str]:
    """Call `check(kind)` on each device kind; send a marker per kind; raise if any failed.

    `kinds` defaults to DLKIT_DEVICES ("auto": every device present). `framework` is "torch" or
    "tf" (TF checks run under `tf.device` or, on a TPU, `TPUStrategy.scope()`). Returns
    {kind: status} when nothing failed.
    """
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework must be one of {FRAMEWORKS}, not {framework!r}")
    statuses: dict[str, str] = {}
    errors: dict[str, Exception] = {}
    visits = _kinds_to_visit(kinds, framework)
    if ("xla", True) in visits and framework == "torch":
        start_xla()  # before the CPU's backward passes, or xla's would fail (devices.start_xla)
    for kind, present in visits:
        if not present:
            statuses[kind] = "skipped"
            _emit(kind, "skipped", _absence(kind, framework))
            continue
        try:
            with _placement(kind, framework):
                check(kind)
        except SkipDevice as why:
            statuses[kind] = "skipped"
            _emit(kind, "skipped", f"not run on {kind}: {why}")
        except Exception as err:  # any failure on one device is reported, and the others still run
            errors[kind] = err
            statuses[kind] = "failed"
            _emit(kind, "failed", _describe(kind, err))
        else:
            statuses[kind] = "passed"
            _emit(kind, "passed")
    if "cpu" in errors:
        raise errors["cpu"]  # the same exception a plain loop would raise: CPU-only grading is unchanged
    if errors:
        raise AssertionError("; ".join(_describe(kind, err) for kind, err in errors.items())
                             + " (passed on cpu)")
    return statuses
