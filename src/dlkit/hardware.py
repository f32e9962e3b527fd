"""Peak-throughput estimates, so that a measured GFLOP/s can be read as a fraction of what the chip could do.

Peaks are spec-sheet arithmetic (units x cores x clock x FLOPs per cycle), not measurements:
the point of notebook 01 is to compare them with what a matmul really reaches.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .devices import xla_backend

#: Spec-sheet peaks (FLOP/s, dense, no structured sparsity) of GPUs students meet on Colab and clusters,
#: per precision: "fp32" on the ordinary cores; "tf32", "bf16" and "fp16" on the tensor cores (FP32
#: accumulation). A precision a GPU's tensor cores lack is absent. Sources: NVIDIA's data sheets
#: (H100/H200 SXM and PCIe/NVL, A100, L40S, L40, L4, A10, A10G, T4, V100) and the Ampere GA102 white paper (RTX 3090).
GPU_PEAKS = {
    "H200 NVL": {"fp32": 60e12, "tf32": 418e12, "bf16": 835e12, "fp16": 835e12},
    "H200": {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12},
    "H100 NVL": {"fp32": 60e12, "tf32": 418e12, "bf16": 835e12, "fp16": 835e12},
    "H100 PCIE": {"fp32": 51e12, "tf32": 378e12, "bf16": 756e12, "fp16": 756e12},
    "H100": {"fp32": 67e12, "tf32": 495e12, "bf16": 989e12, "fp16": 989e12},  # SXM
    "A100": {"fp32": 19.5e12, "tf32": 156e12, "bf16": 312e12, "fp16": 312e12},
    "L40S": {"fp32": 91.6e12, "tf32": 183e12, "bf16": 362e12, "fp16": 362e12},
    "L40": {"fp32": 90.5e12, "tf32": 90.5e12, "bf16": 181e12, "fp16": 181e12},
    "L4": {"fp32": 30.3e12, "tf32": 60e12, "bf16": 121e12, "fp16": 121e12},
    "A10G": {"fp32": 31.2e12, "tf32": 35e12, "bf16": 70e12, "fp16": 70e12},
    "A10": {"fp32": 31.2e12, "tf32": 62.5e12, "bf16": 125e12, "fp16": 125e12},
    "T4": {"fp32": 8.1e12, "fp16": 65e12},
    "V100": {"fp32": 15.7e12, "fp16": 125e12},
    "P100": {"fp32": 9.3e12},
    "K80": {"fp32": 4.1e12},
    "RTX 3090": {"fp32": 35.6e12, "tf32": 35.6e12, "bf16": 71e12, "fp16": 71e12},
    "RTX 2080 Ti": {"fp32": 13.4e12},
    "TITAN RTX": {"fp32": 16.3e12},
}
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


def _cpu_flags_and_mhz() -> tuple[set[str], float | None]:
    """CPU feature flags and the highest clock the OS reports (the turbo maximum when it is known)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set(), None
    flags = re.search(r"^flags\s*:\s*(.*)$", text, re.M)
    mhz = [float(v) for v in re.findall(r"^cpu MHz\s*:\s*([\d.]+)", text, re.M)]
    try:  # kHz; absent in most virtual machines, which then report only the base clock
        mhz.append(int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) / 1000)
    except (OSError, ValueError):
        pass
    return (set(flags.group(1).split()) if flags else set()), (max(mhz) if mhz else None)


def physical_cores(cpuinfo: str | None = None, usable: set[int] | None = None) -> int:
    """Physical cores among the logical CPUs this process may use (hyperthreads share a core's FMA units).

    Counted from /proc/cpuinfo's (physical id, core id) pairs; where those are missing (a VM that
    hides its topology, a non-Linux system), the logical CPUs are counted instead.
    """
    if usable is None:
        usable = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return len(usable)
    cores = set()
    for block in cpuinfo.strip().split("\n\n"):
        fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if "processor" not in fields or "core id" not in fields:
            return len(usable)
        if int(fields["processor"]) in usable:
            cores.add((fields.get("physical id", "0"), fields["core id"]))
    return len(cores) or len(usable)


def cpu_peak_flops(cores: int | None = None, clock_hz: float | None = None) -> float:
    """Estimated FP32 peak of the CPUs this process may use.

    Cores are physical cores (two hyperthreads of one core share its vector units, so they do not
    double the peak). FP32 FLOPs per cycle per core follow the widest vector FMA the CPU reports: AVX-512 64,
    AVX2+FMA 32, AVX 16, else 8. The clock defaults to the highest the OS reports (or 3 GHz if
    unknown); a virtual machine often reports only its base clock, so a measured throughput can
    beat this estimate when the chip runs in turbo.
    """
    flags, mhz = _cpu_flags_and_mhz()
    if cores is None:
        cores = physical_cores()
    if clock_hz is None:
        clock_hz = mhz * 1e6 if mhz else 3e9
    if "avx512f" in flags:
        per_cycle = 64
    elif "avx2" in flags and "fma" in flags:
        per_cycle = 32
    elif "avx" in flags:
        per_cycle = 16
    else:
        per_cycle = 8
    return cores * clock_hz * per_cycle


def gpu_peak_flops(name: str, precision: str = "fp32") -> float | None:
    """Peak of a GPU named like "NVIDIA A100-SXM4-40GB" in `precision` (fp32, tf32, bf16, fp16), or None
    if the kit does not know the GPU or its tensor cores lack that precision."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    upper = name.upper()
    for model in sorted(GPU_PEAKS, key=len, reverse=True):  # "H100 PCIE" before "H100"
        if model.upper() in upper:
            return GPU_PEAKS[model].get(precision)
    return None


def device_peak_flops(kind: str, precision: str = "fp32") -> float | None:
    """Peak of a torch device kind ("cpu", "cuda", ...) in `precision`, or None where no estimate exists.

    The CPU estimate exists for fp32 only (see cpu_peak_flops).
    """
    if kind == "cpu":
        return cpu_peak_flops() if precision == "fp32" else None
    if kind == "cuda":
        import torch

        return gpu_peak_flops(torch.cuda.get_device_name(), precision)
    return None


def device_name(kind: str) -> str:
    """A human-readable name for a torch device kind, for plot legends."""
    if kind == "cuda":
        import torch

        return torch.cuda.get_device_name()
    if kind == "xla":
        backend = xla_backend()
        if backend:
            return "TPU (torch_xla)" if backend == "TPU" else f"xla on {backend} (torch_xla without a TPU)"
    if kind == "cpu":
        try:
            text = Path("/proc/cpuinfo").read_text()
            model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
            if model:
                return model.group(1).strip()
        except OSError:
            pass
    return kind
