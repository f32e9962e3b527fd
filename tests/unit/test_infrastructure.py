"""A failure of the grading machine is never a student's zero: how it is recognised, and what kernels get.

tests/pipeline/test_infrastructure.py grades with a kernel that cannot start.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.grading.preprocessors import KernelStartFailure, take_machine_failures
from autograder.options import GradingOptions
from autograder.paths import REPO


def test_a_machine_failure_is_the_graders_own_record_never_text_in_a_log():
    """A student can print anything, into outputs, logs and kernel messages; the pipeline learns of a machine
    failure only from KernelStartFailure objects the grader's own code created (hostile_fakes_machine_failure
    prints the old log marker in every form it can and is graded as usual)."""
    take_machine_failures()
    assert take_machine_failures() == []
    KernelStartFailure("the kernel did not start: RuntimeError: Kernel died before replying to kernel_info")
    assert take_machine_failures() == ["the kernel did not start: RuntimeError: Kernel died before replying to "
                                       "kernel_info"]
    assert take_machine_failures() == [], "taken once"


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

    zygote = warm.Zygote.spawn(("torch",))
    try:
        zygote.ready()  # started without waiting: read its environment once it runs the zygote
        assert _environment_of(zygote.server).get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1"
    finally:
        zygote.close()
    # In a fresh process, as in a student's kernel: the stdlib fork server is one per process, and a
    # test run may already have one that something else (Dask, say) started.
    # Read once the server has exec'd (its command line names the fork server): until then /proc shows the
    # environment of the process it was forked from (a busy machine showed that race).
    probe = ("import importlib, pathlib, time; m = importlib.import_module('dlkit.launch'); pid = m._fork_server();"
             "proc = pathlib.Path(f'/proc/{pid}'); deadline = time.monotonic() + 30\n"
             "while b'forkserver' not in (proc / 'cmdline').read_bytes() and time.monotonic() < deadline:"
             " time.sleep(0.01)\n"
             "print(b'PYTORCH_NVML_BASED_CUDA_CHECK=1' in (proc / 'environ').read_bytes().split(bytes(1)))")
    server = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    assert server.stdout.strip() == "True", server.stdout + server.stderr
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
