"""Peak-throughput estimates, so that a measured GFLOP/s can be read as a fraction of what the chip could do.

Peaks are spec-sheet arithmetic (units x cores x clock x FLOPs per cycle), not measurements:
the point of notebook 01 is to compare them with what a matmul really reaches.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

# FP32 peak (FLOP/s, without tensor cores) of GPUs students meet on Colab and clusters.
GPU_FP32_PEAK = {
    "H200": 67e12,
    "H100": 67e12,
    "A100": 19.5e12,
    "L4": 30.3e12,
    "A10": 31.2e12,
    "T4": 8.1e12,
    "V100": 15.7e12,
    "P100": 9.3e12,
    "K80": 4.1e12,
    "RTX 3090": 35.6e12,
    "RTX 2080 Ti": 13.4e12,
    "TITAN RTX": 16.3e12,
}


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


def cpu_peak_flops(cores: int | None = None, clock_hz: float | None = None) -> float:
    """Estimated FP32 peak of the CPUs this process may use.

    FP32 FLOPs per cycle per core follow the widest vector FMA the CPU reports: AVX-512 64,
    AVX2+FMA 32, AVX 16, else 8. The clock defaults to the highest the OS reports (or 3 GHz if
    unknown); a virtual machine often reports only its base clock, so a measured throughput can
    beat this estimate when the chip runs in turbo.
    """
    flags, mhz = _cpu_flags_and_mhz()
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
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


def gpu_peak_flops(name: str) -> float | None:
    """FP32 peak for a GPU name such as "NVIDIA A100-SXM4-40GB", or None if the kit does not know it."""
    upper = name.upper()
    for model in sorted(GPU_FP32_PEAK, key=len, reverse=True):  # "RTX 3090" before "RTX"
        if model.upper() in upper:
            return GPU_FP32_PEAK[model]
    return None


def device_peak_flops(kind: str) -> float | None:
    """FP32 peak of a torch device kind ("cpu", "cuda", ...), or None where no estimate exists."""
    if kind == "cpu":
        return cpu_peak_flops()
    if kind == "cuda":
        import torch

        return gpu_peak_flops(torch.cuda.get_device_name())
    return None


def device_name(kind: str) -> str:
    """A human-readable name for a torch device kind, for plot legends."""
    if kind == "cuda":
        import torch

        return torch.cuda.get_device_name()
    if kind == "cpu":
        try:
            text = Path("/proc/cpuinfo").read_text()
            model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
            if model:
                return model.group(1).strip()
        except OSError:
            pass
    return kind
