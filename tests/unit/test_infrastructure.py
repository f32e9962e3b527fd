"""A failure of the grading machine is never a student's zero: retried once cold, then the run stops."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.authoring.samples import SUBMISSIONS
from autograder.grading.autograde import infrastructure_failure
from autograder.options import GradingOptions
from autograder.paths import REPO


def test_the_kernel_start_failure_is_read_from_nbgrader_log():
    log = ("[AutogradeApp | ERROR] There was an error processing assignment: /w/submitted/a/01_tensors\n"
           "Traceback (most recent call last):\n  ...\n"
           "RuntimeError: Kernel died before replying to kernel_info\n\n"
           "The above exception was the direct cause of the following exception:\n\n"
           "autograder.grading.preprocessors.KernelStartFailure: the kernel did not start: RuntimeError: "
           "Kernel died before replying to kernel_info\n")
    assert infrastructure_failure(log) == "the kernel did not start: RuntimeError: Kernel died before replying to kernel_info"
    assert infrastructure_failure("[ERROR] AssertionError: the student's test failed") is None
    assert infrastructure_failure("") is None


@pytest.mark.pipeline
def test_a_kernel_that_cannot_start_stops_the_run_and_records_no_grade(tmp_path):
    """A broken kernel install (its kernelspec runs a command that exits at once) fails every start."""
    spec_dir = tmp_path / "jupyter" / "kernels" / "python3"
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-c", "import sys; sys.exit(3)", "-f", "{connection_file}"],
        "display_name": "Python 3 (broken install)", "language": "python"}))
    class_dir = tmp_path / "class"
    shutil.copytree(SUBMISSIONS / "reference" / "01_tensors", class_dir / "alice" / "01_tensors")
    out = tmp_path / "out"
    env = dict(os.environ, JUPYTER_PATH=str(tmp_path / "jupyter"))
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(class_dir), str(out), "--workers", "1",
                           "--cold-kernels", "--assignments", "01_tensors"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "grading stopped because the grading machine failed, not a student" in proc.stderr
    assert "alice/01_tensors: the kernel did not start" in proc.stderr
    assert "and again with a cold kernel" in proc.stderr
    worker_logs = "".join(p.read_text() for p in (out / "logs").glob("worker-*.log"))
    assert "retrying once with a cold kernel" in worker_logs
    assert not (out / "grades.csv").exists() and not (out / "results.csv").exists()
    assert not (out / ".done").exists() or not any((out / ".done").iterdir()), "nothing stored for a resume"


def _environment_of(pid: int) -> dict[str, str]:
    raw = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_processes_that_fork_kernels_or_ranks_never_initialise_cuda():
    """The zygote and dlkit.launch's fork server ask NVML, not the CUDA runtime, whether a GPU is there.

    On a CUDA machine, a process forked after cudaGetDeviceCount cannot use CUDA ("Cannot
    re-initialize CUDA in forked subprocess"); torch's compiler stack calls torch.cuda.is_available()
    when imported, which the zygote preloads. With PYTORCH_NVML_BASED_CUDA_CHECK=1 it asks NVML.
    """
    from autograder.execution import warm
    launch = importlib.import_module("dlkit.launch")  # the module: `dlkit.launch` is also the re-exported function

    zygote = warm.Zygote(("torch",))
    try:
        zygote.ready()  # started without waiting: read its environment once it runs the zygote
        assert _environment_of(zygote.pid).get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1"
    finally:
        zygote.close()
    server = launch._fork_server()
    assert server is not None
    try:
        assert _environment_of(server.proc.pid).get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1"
    finally:
        server.stop()
    probe = subprocess.run([sys.executable, "-c", "import torch.cuda; print(torch.cuda._nvml_based_avail())"],
                           env={**os.environ, **warm.ZYGOTE_ENV}, capture_output=True, text=True, check=True)
    assert probe.stdout.strip() == "True", "torch no longer reads the variable: find its new switch"


def test_kernels_get_the_same_numerics_on_every_machine_and_share_the_gpu():
    """TF32 off, TensorFlow's GPU memory taken on demand and the run's devices, in every kernel of every worker
    (the same dict travels to Dask workers on other machines); a thread count the TA set wins."""
    options = GradingOptions(out=Path("out"), workers=4, devices=("cpu", "fakegpu"))
    env = options.kernel_environment()
    assert env["NVIDIA_TF32_OVERRIDE"] == "0" and env["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert env["DLKIT_DEVICES"] == "cpu,fakegpu"
    if "OMP_NUM_THREADS" not in os.environ:
        assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 4))
