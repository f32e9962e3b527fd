"""Say in words what the runtime a notebook runs in has, for the setup cell atop every release notebook.

The setup cell runs first in every notebook, in Colab, in Jupyter and inside the grader, so this
stays cheap and harmless: library versions come from package metadata and GPUs from
`nvidia-smi`, so neither torch nor TensorFlow is imported (seconds each, and a TensorFlow
notebook would pay for torch too); a TPU is detected without importing torch_xla.
"""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess
import sys

from .devices import is_colab, tpu_present

#: What a notebook may ask for in its metadata ("dlkit": {"accelerator": ...}).
ACCELERATORS = ("cpu", "gpu", "tpu")
_LIBRARIES = ("torch", "tensorflow", "tensorflow-cpu", "jax", "numpy")


def library_versions() -> dict[str, str]:
    """Installed versions of the deep-learning libraries, by distribution name, read without importing them."""
    found = {}
    for name in _LIBRARIES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def gpu_names() -> list[str]:
    """Names of the NVIDIA GPUs `nvidia-smi` lists; empty when there is none or it cannot tell."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=15)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def advice(wants: str, gpus: list[str], tpu: bool, colab: bool) -> str:
    """Is this runtime right for a notebook that wants `wants`, and how to switch if not."""
    if wants in ("gpu", "tpu"):
        kind = wants.upper()
        if (gpus if wants == "gpu" else tpu):
            return f"This notebook measures on a {kind}, and this runtime has one: good."
        if colab:
            pick = "a GPU (a T4 is enough)" if wants == "gpu" else "a TPU"
            how = f"Switch in Colab's menu: Runtime > Change runtime type > {pick} > Save, then run again from the top."
        else:
            how = f"Open it in Colab (the badge above) with a {kind} runtime, or run it on a machine with a {kind}."
        return f"This notebook measures more with a {kind}. {how} Everything also works on the CPU."
    if colab and (gpus or tpu):
        return ("This notebook needs no accelerator: a CPU runtime is enough, and switching to one "
                "(Runtime > Change runtime type) saves your Colab GPU/TPU quota.")
    return "This notebook needs no accelerator: the CPU is enough."


def runtime_summary(wants: str = "cpu") -> str:
    """What this runtime has (Colab or not, libraries, accelerators) and whether the notebook wants more."""
    if wants not in ACCELERATORS:
        raise ValueError(f"wants={wants!r}: expected one of {ACCELERATORS}")
    colab, gpus, tpu = is_colab(), gpu_names(), tpu_present()
    versions = ", ".join(f"{k} {v}" for k, v in library_versions().items()) or "none of torch/TensorFlow/JAX"
    devices = ["CPU"] + [f"GPU {name}" for name in gpus] + (["TPU"] if tpu else [])
    return "\n".join([
        f"runtime: {'Google Colab' if colab else 'not Colab'}, Python {platform.python_version()} ({sys.platform})",
        f"libraries: {versions}",
        f"devices: {', '.join(devices)}",
        advice(wants, gpus, tpu, colab),
    ])


def report_runtime(wants: str = "cpu") -> None:
    """Print runtime_summary(wants); what the release notebooks' setup cell calls."""
    print(runtime_summary(wants))
