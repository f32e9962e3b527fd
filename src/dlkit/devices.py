"""Which devices can this runtime compute on, and how to wait for them.

Notebooks and hidden tests loop over `test_devices()`, so one test checks a student's code on
the CPU and on every accelerator the kernel has (a Colab GPU or TPU included). Discovery is
cheap and side-effect free: it never imports torch_xla (importing it claims the TPU) or
TensorFlow unless the caller asks for them (`test_devices` starts xla when it is to be visited).

torch's "xla" kind is also present without a TPU where torch_xla is installed and PJRT_DEVICE names
a backend: PJRT_DEVICE=CPU gives an `xla:0` device computed on the CPU (`make test-xla` grades on it).
It runs the TPU code path (lazy tensors, compiled graphs, torch_xla's own synchronisation) but is no
TPU, and `xla_backend()` says which one it is. TensorFlow's "xla" (TPUStrategy) needs a real TPU.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

#: Comma-separated device kinds to test on ("cpu,cuda"), or "auto" for every one present.
DEVICES_ENV = "DLKIT_DEVICES"

#: torch_xla's runtime choice: "TPU" on a TPU VM, "CPU" for the CPU-backed xla device.
PJRT_ENV = "PJRT_DEVICE"

#: Device kinds the kit knows, in the order tests visit them. "xla" is a TPU (torch_xla, or
#: TensorFlow's TPUStrategy); "fakegpu" is the simulated accelerator of dlkit.fakegpu, visited
#: only when named explicitly, never by "auto".
KNOWN_KINDS = ("cpu", "cuda", "mps", "xla", "fakegpu")


#: Device files whose presence means a GPU that torch.cuda (or TensorFlow) can drive: NVIDIA's driver,
#: its WSL counterpart, AMD's ROCm.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/dxg", "/dev/kfd")


def is_colab() -> bool:
    """True inside a Google Colab runtime (checked without importing anything)."""
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def tpu_present() -> bool:
    """True when a TPU is attached, judged from the environment and /dev, not by importing torch_xla."""
    if os.environ.get("TPU_NAME") or os.environ.get("COLAB_TPU_ADDR"):
        return True
    if importlib.util.find_spec("torch_xla") is None and importlib.util.find_spec("libtpu") is None:
        return False
    return any(Path("/dev").glob("accel*")) or Path("/dev/vfio").is_dir()


def xla_backend() -> str | None:
    """What torch's "xla" device runs on here: PJRT_DEVICE's value ("CPU": no TPU) when it is set, else
    "TPU" when a TPU is attached; None where torch_xla is not installed. Never imports torch_xla."""
    if importlib.util.find_spec("torch_xla") is None:
        return None
    chosen = os.environ.get(PJRT_ENV, "").strip().upper()
    return chosen or ("TPU" if tpu_present() else None)


def xla_blocked() -> str | None:
    """Why torch_xla cannot be loaded into this process now, or None when it can (or already is).

    TensorFlow and torch_xla each carry their own LLVM: importing torch_xla after TensorFlow aborts
    the process ("LLVM ERROR: inconsistency in registered CommandLine options", seen with
    tensorflow-cpu 2.21 and torch_xla 2.9), while the other order works. `preload_xla` imports it first.
    """
    if "torch_xla" in sys.modules or "tensorflow" not in sys.modules:
        return None
    return "torch_xla cannot be loaded after TensorFlow in one process (both carry LLVM); import torch_xla first"


def start_xla() -> None:
    """Import torch_xla and start its runtime (the PJRT client), before this process's first backward pass.

    Autograd sizes its per-device worker queues once, at the first backward of the process, from
    the devices started by then: after a CPU backward, every xla backward failed an internal assert
    ("device_ready_queues_", torch 2.9 with torch_xla 2.9). Not to be called in a process that
    forks kernels: a PJRT client does not survive a fork.
    """
    import torch_xla.runtime as xr

    xr.global_runtime_device_count()


def preload_xla() -> None:
    """Start torch_xla where "xla" is requested and torch can use it, before student code runs.

    dlkit.integrity.snapshot calls this in the grader's first cell: a notebook that imports
    TensorFlow, or runs a backward pass before its first test, could otherwise not use xla.
    """
    if "xla" in requested_devices() and xla_backend() and xla_blocked() is None:
        start_xla()


def torch_devices() -> list[str]:
    """Every torch device kind this process can use, "cpu" first."""
    import torch

    found = ["cpu"]
    if torch.cuda.is_available():
        found.append("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    if xla_backend() and xla_blocked() is None:
        found.append("xla")
    return found


def tf_devices() -> list[str]:
    """TensorFlow's logical devices ("/device:CPU:0", "/device:GPU:0", ...); imports TensorFlow."""
    import tensorflow as tf

    return [d.name for d in tf.config.list_logical_devices()]


def tf_kinds_present() -> list[str]:
    """The device kinds TensorFlow can use here ("cpu", "cuda", "xla"); imports TensorFlow, not the TPU runtime."""
    import tensorflow as tf

    found = ["cpu"]
    if tf.config.list_physical_devices("GPU"):
        found.append("cuda")
    if tpu_present():
        found.append("xla")
    return found


def explicit_devices() -> list[str] | None:
    """The device kinds named in DLKIT_DEVICES, or None for "auto" (unset): every device present."""
    raw = os.environ.get(DEVICES_ENV, "auto").strip().lower()
    if raw in ("", "auto"):
        return None
    kinds = [k.strip() for k in raw.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(KNOWN_KINDS))
    if unknown:
        raise ValueError(f"{DEVICES_ENV}={raw!r} names unknown device kinds {unknown}; known: {KNOWN_KINDS}")
    return kinds


def requested_devices() -> list[str]:
    """The device kinds asked for through DLKIT_DEVICES ("auto" or unset means every real kind)."""
    explicit = explicit_devices()
    return [k for k in KNOWN_KINDS if k != "fakegpu"] if explicit is None else explicit


def resolve_devices(spec: str) -> list[str]:
    """The explicit kinds a grader asks its kernels for: "auto" becomes the kinds this machine has.

    Naming them keeps a kernel's report honest: a kind it cannot use comes back "skipped", and a
    marker for a kind nobody asked for is ignored.

    Judged from device files, without importing torch (2 s of every grading run's start-up):
    an NVIDIA driver (/dev/nvidiactl, or /dev/dxg under WSL) or ROCm (/dev/kfd, which torch.cuda
    drives too) means "cuda", even where the installed torch is a CPU build that TensorFlow's GPU
    build would still use; a kernel that cannot use a kind reports it as skipped. Only on macOS,
    where MPS has no device file, is torch asked.
    """
    if spec.strip().lower() not in ("", "auto"):
        kinds = [k.strip() for k in spec.lower().split(",") if k.strip()]
        unknown = sorted(set(kinds) - set(KNOWN_KINDS))
        if unknown:
            raise ValueError(f"unknown device kinds {unknown}; known: {KNOWN_KINDS}")
        return ["cpu"] + [k for k in dict.fromkeys(kinds) if k != "cpu"]
    found = {"cpu"}
    if any(Path(f).exists() for f in GPU_DEVICE_FILES):
        found.add("cuda")
    if sys.platform == "darwin" and importlib.util.find_spec("torch"):
        found.update(torch_devices())
    if tpu_present():
        found.add("xla")
    return [k for k in KNOWN_KINDS if k in found]


def test_devices() -> list[str]:
    """The real torch device kinds a test should visit: requested and present, in a stable order.

    Unlike the other look-ups it starts torch_xla when "xla" is among them (see `start_xla`).
    The CPU is always included so that every submission is graded at least once. The simulated
    "fakegpu" is not among them: it works only inside `check_on_devices`, which switches it on.
    """
    present = torch_devices()
    wanted = set(requested_devices()) | {"cpu"}
    kinds = [kind for kind in present if kind in wanted]
    if "xla" in kinds:  # a notebook's setup cell asks this first: start xla before any backward pass
        start_xla()
    return kinds


test_devices.__test__ = False  # a library function named like a test: pytest must not collect it where it is imported


def has_float64(kind: str) -> bool:
    """Whether tests should compute in float64 on a device kind: not on MPS (it has none), nor on a TPU
    ("xla": no float64 units; XLA emulates it far slower, where the TPU's compiler accepts it at all).
    The CPU-backed xla has float64, but it stands in for a TPU. The simulated "fakegpu" stands in for
    CUDA, which has float64."""
    return kind not in ("mps", "xla")


def default_device() -> str:
    """The fastest torch device kind present: an accelerator when there is one, else "cpu"."""
    devices = test_devices()
    return devices[-1] if len(devices) > 1 else "cpu"


def as_torch_device(kind: str):
    """A `torch.device` for a kind; imports torch_xla only when the kind is "xla".

    "fakegpu" is `torch.device("meta")`, which holds data only inside `check_on_devices`.
    """
    import torch

    if kind == "fakegpu":
        return torch.device("meta")
    if kind == "xla":
        import torch_xla.core.xla_model as xm  # noqa: F401  (registers the xla device)
    return torch.device(kind)


def synchronize(device) -> None:
    """Wait until queued work on `device` has finished, so that a timer measures the work itself.

    CUDA, MPS and XLA run asynchronously: without this a timer only measures the launch.
    """
    kind = getattr(device, "type", str(device)).split(":")[0]
    if kind == "cuda":
        import torch

        torch.cuda.synchronize(device)
    elif kind == "mps":
        import torch

        torch.mps.synchronize()
    elif kind == "xla":  # lazy tensors: sync() compiles and launches the pending graph, then wait for it
        import torch_xla
        import torch_xla.core.xla_model as xm

        torch_xla.sync()
        xm.wait_device_ops()
