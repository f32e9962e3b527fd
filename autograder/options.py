"""How a class is graded: one object, built by the command line and handed to every step that depends on it.

The workers, the resume digest and the result collection all read the same GradingOptions instead of
the process environment, so a step cannot grade with settings other than the ones the TA gave, and a
test can build the options it needs without touching global state. Only the kernels read an
environment, and theirs is written from these options (`kernel_environment`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from autograder.isolation.limits import Limits
from dlkit.devices import DEVICES_ENV, resolve_devices

ENGINES = ("local", "dask")


@dataclass(frozen=True)
class GradingOptions:
    """Everything a grading run depends on besides the submissions themselves."""

    out: Path                                   # OUT: grades, feedback, gradebook, logs
    workers: int = 1                            # submissions graded at once
    limits: Limits = field(default_factory=Limits)
    devices: tuple[str, ...] = ("cpu",)         # device kinds every test cell visits (grading_devices)
    warm_kernels: bool = True                   # fork kernels from a zygote (execution/warm.py)
    engine: str = "local"                       # "local" worker processes or "dask"
    scheduler: str | None = None                # a running Dask scheduler's address (engine "dask")
    db_url: str | None = None                   # the class gradebook; None: sqlite in OUT
    allow_unsandboxed: bool = False             # the TA accepted student code running with the grader's rights

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine {self.engine!r}: known engines are {ENGINES}")
        if not self.devices:
            raise ValueError("no device kinds to grade on")

    def kernel_environment(self, workers: int | None = None) -> dict[str, str]:
        """The environment every grading kernel gets on top of its worker's: the devices to visit, and
        defaults that give the same answer on every machine and each kernel a fair share of the cores.

        - DLKIT_DEVICES: the kinds every device-checked test visits (dlkit.devices reads it in the kernel).
        - MPLBACKEND=Agg: no plot windows.
        - NVIDIA_TF32_OVERRIDE=0: on Ampere and later GPUs TensorFlow computes float32 matmuls and
          convolutions in TF32 by default (10 mantissa bits), and torch its cuDNN convolutions; off, so
          float32 answers are checked in float32 and a grade never depends on the GPU generation.
        - TF_FORCE_GPU_ALLOW_GROWTH=true: TensorFlow otherwise reserves nearly all of a GPU's memory in the
          first kernel that touches it, and every other worker's kernel fails to allocate; with it, kernels
          share the GPU by taking what they use (as PyTorch's caching allocator does by default).
        - Thread pools sized to the kernel's share of the cores: BLAS and OpenMP pools sized for the whole
          machine in each of `workers` kernels oversubscribe it (one mid-sized matmul measured 20x slower).

        A default the TA set in the grader's own environment (OMP_NUM_THREADS=4, say) wins over the kit's.
        """
        threads = str(max(1, (os.cpu_count() or 1) // max(1, workers or self.workers)))
        defaults = {"MPLBACKEND": "Agg", "NVIDIA_TF32_OVERRIDE": "0", "TF_FORCE_GPU_ALLOW_GROWTH": "true",
                    "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}
        chosen = {name: os.environ.get(name, value) for name, value in defaults.items()}
        return {**chosen, DEVICES_ENV: ",".join(self.devices)}


def grading_devices(spec: str) -> list[str]:
    """The device kinds every test cell visits: `spec` resolved, and for "auto" on a machine with no
    accelerator, the simulated one (dlkit.fakegpu) as well.

    A hidden `.cpu()`, a tensor created without `device=` or `.numpy()` on a device tensor must cost
    a student the same points on a laptop as on a GPU server; without an accelerator only the
    simulation can show them. Named kinds ("cpu", "cpu,cuda") are taken as they are.
    """
    kinds = resolve_devices(spec)
    if spec.strip().lower() in ("", "auto") and kinds == ["cpu"]:
        kinds.append("fakegpu")
    return kinds
