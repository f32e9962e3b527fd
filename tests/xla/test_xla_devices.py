"""dlkit on torch_xla's real xla device, run on the CPU (PJRT_DEVICE=CPU): `make test-xla` only.

The TPU code path of dlkit (discovery, synchronisation, device checks) executes here for real;
what only a TPU could show (float64, speed) is not claimed. Skipped where torch_xla is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch_xla")

import torch  # noqa: E402

import dlkit  # noqa: E402
from dlkit import devices, ondevice  # noqa: E402

pytestmark = pytest.mark.skipif(os.environ.get("PJRT_DEVICE", "").upper() != "CPU",
                                reason="needs PJRT_DEVICE=CPU (make test-xla sets it)")


def run_python(code: str) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter: what must hold from a process's start (first backward, import order)."""
    env = dict(os.environ, DLKIT_DEVICES="cpu,xla", TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=300)


def markers(text: str) -> dict[str, dict]:
    return {r["device"]: r for r in (json.loads(line[len(ondevice.MARKER):]) for line in text.splitlines()
                                     if line.startswith(ondevice.MARKER))}


def test_the_cpu_backed_xla_is_found_and_not_called_a_tpu():
    assert devices.xla_backend() == "CPU"
    assert "xla" in devices.torch_devices()
    assert not devices.tpu_present()
    assert dlkit.device_name("xla") == "xla on CPU (torch_xla without a TPU)"
    assert not dlkit.has_float64("xla"), "tests must not rely on float64 on a TPU"
    assert dlkit.as_torch_device("xla").type == "xla"


def test_device_bugs_fail_on_xla_and_pass_on_the_cpu(monkeypatch, capsys):
    monkeypatch.setenv("DLKIT_DEVICES", "cpu,xla")

    def to_numpy(kind):  # .numpy() without .cpu()
        torch.ones(3, device=dlkit.as_torch_device(kind)).numpy()

    def clamp_with_a_cpu_tensor(kind):  # a tensor made without device=
        x = torch.randn(4, 4, device=dlkit.as_torch_device(kind))
        torch.maximum(x, torch.zeros(4, 4))

    for check in (to_numpy, clamp_with_a_cpu_tensor):
        with pytest.raises(AssertionError, match=r"^on xla: .* \(passed on cpu\)$"):
            dlkit.check_on_devices(check)
        seen = markers(capsys.readouterr().out)
        assert (seen["cpu"]["status"], seen["xla"]["status"]) == ("passed", "failed")


def test_benchmark_times_the_work_not_the_recording():
    xla = dlkit.as_torch_device("xla")
    a = torch.randn(1024, 1024, device=xla)
    dlkit.synchronize(xla)
    timing = dlkit.benchmark(lambda: a @ a, device=xla, warmup=1, repeats=3)
    # 2 GFLOP: tens of ms on a CPU; recording the op alone took 0.1 ms when results were dropped unsynced.
    assert timing.median > 2e-3, timing


def test_xla_backward_works_after_a_cpu_backward():
    """Autograd sizes its device queues at the first backward: check_on_devices starts xla before the CPU's."""
    proc = run_python("""
        import torch, dlkit
        def check(kind):
            w = torch.randn(3, device=dlkit.as_torch_device(kind), requires_grad=True)
            (w * w).sum().backward()
            assert torch.allclose(w.grad.cpu(), 2 * w.detach().cpu())
        print(dlkit.check_on_devices(check))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "{'cpu': 'passed', 'xla': 'passed'}" in proc.stdout


def test_after_tensorflow_xla_is_skipped_with_the_reason_not_a_crash():
    proc = run_python("""
        import tensorflow, torch, dlkit
        print(dlkit.check_on_devices(lambda kind: None))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    xla = markers(proc.stdout)["xla"]
    assert xla["status"] == "skipped" and "cannot be loaded after TensorFlow" in xla["message"], xla


def test_tensorflow_xla_is_tpustrategy_and_is_skipped_without_a_tpu():
    proc = run_python("""
        import dlkit
        dlkit.devices.preload_xla()
        import tensorflow
        print(dlkit.check_on_devices(lambda kind: None, framework="tf"))
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    xla = markers(proc.stdout)["xla"]
    assert xla["status"] == "skipped" and "TPUStrategy, which needs a TPU" in xla["message"], xla
