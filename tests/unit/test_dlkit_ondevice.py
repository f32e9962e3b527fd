"""dlkit.check_on_devices and the simulated accelerator: per-device markers, skips, and real device bugs on a CPU."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import dlkit
from dlkit import devices, fakegpu
from dlkit.ondevice import MARKER


def markers(text: str) -> list[dict]:
    return [json.loads(line[len(MARKER):]) for line in text.splitlines() if line.startswith(MARKER)]


def test_auto_visits_only_what_is_present_and_skips_nothing(monkeypatch, capsys):
    monkeypatch.delenv(devices.DEVICES_ENV, raising=False)
    seen = []
    dlkit.check_on_devices(seen.append)
    assert seen == dlkit.test_devices() and "fakegpu" not in seen
    assert [m["status"] for m in markers(capsys.readouterr().out)] == ["passed"] * len(seen)


def test_a_requested_device_that_is_absent_is_skipped_never_passed(monkeypatch, capsys):
    absent = next((k for k in ("cuda", "mps", "xla") if k not in devices.resolve_devices("auto")), None)
    if absent is None:
        pytest.skip("every device kind is present")
    monkeypatch.setenv(devices.DEVICES_ENV, f"{absent},cpu")
    seen = []
    assert dlkit.check_on_devices(seen.append) == {"cpu": "passed", absent: "skipped"}
    assert seen == ["cpu"], "the CPU comes first, the absent kind is not called"
    skipped = markers(capsys.readouterr().out)[1]
    assert skipped == {"device": absent, "status": "skipped", "message": f"not run: this runtime has no {absent}"}


def test_a_failure_on_the_accelerator_alone_names_it(monkeypatch, capsys):
    monkeypatch.setenv(devices.DEVICES_ENV, "cpu,fakegpu")

    def check(kind):
        if kind != "cpu":
            raise AssertionError("wrong answer")

    with pytest.raises(AssertionError, match=r"^on fakegpu: wrong answer \(passed on cpu\)$"):
        dlkit.check_on_devices(check)
    assert [(m["device"], m["status"]) for m in markers(capsys.readouterr().out)] == [("cpu", "passed"),
                                                                                       ("fakegpu", "failed")]


def test_a_failure_on_the_cpu_raises_the_cpus_own_exception(monkeypatch):
    monkeypatch.setenv(devices.DEVICES_ENV, "cpu,fakegpu")

    def check(kind):
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):
        dlkit.check_on_devices(check)


def test_a_check_that_cannot_run_on_a_device_reports_it_skipped(monkeypatch, capsys):
    monkeypatch.setenv(devices.DEVICES_ENV, "cpu,fakegpu")

    def check(kind):
        if kind == "fakegpu":
            raise dlkit.SkipDevice("export cannot trace it")

    assert dlkit.check_on_devices(check) == {"cpu": "passed", "fakegpu": "skipped"}
    assert markers(capsys.readouterr().out)[1]["message"] == "not run on fakegpu: export cannot trace it"


def run_on_fakegpu(fn):
    with fakegpu.active() as dev:
        return fn(dev)


def test_simulated_accelerator_computes_real_values_with_autograd():
    def fn(dev):
        w = torch.randn(4, 3, device=dev, requires_grad=True)
        x = torch.randn(2, 4).to(dev)
        loss = (x @ w).relu().sum()
        loss.backward()
        assert w.device.type == "meta" and w.grad.device.type == "meta"
        dlkit.assert_close(w.grad, (x.cpu().T @ ((x.cpu() @ w.detach().cpu()) > 0).float()))
        return torch.nn.Linear(3, 2).to(dev)(x @ w).device

    assert run_on_fakegpu(fn).type == "meta"


@pytest.mark.parametrize("bug,error", [
    (lambda x, dev: x + torch.ones(x.shape), "same device"),          # created without device=
    (lambda x, dev: x.detach().numpy(), "can't convert meta"),         # .numpy() on an accelerator tensor
    (lambda x, dev: np.asarray(x), "can't convert meta"),
])
def test_simulated_accelerator_refuses_what_a_gpu_refuses(bug, error):
    with pytest.raises((RuntimeError, TypeError), match=error):
        run_on_fakegpu(lambda dev: bug(torch.randn(3, 2, device=dev), dev))


def test_simulated_accelerator_allows_what_cuda_allows():
    def fn(dev):
        x = torch.randn(3, 2, device=dev)
        y = x * torch.tensor(2.0) + x[torch.tensor([0, 2])].sum()  # a 0-dim CPU tensor, CPU indices
        return y.cpu(), y.max().item()

    out, top = run_on_fakegpu(fn)
    assert out.device.type == "cpu" and isinstance(top, float)


def test_simulated_accelerator_accepts_what_correct_code_does_on_cuda():
    """numpy(force=True) (detach and copy to the host) and float64 work on CUDA and Colab's GPUs: a simulation
    that refused them took points from correct answers on CPU-only graders only."""
    def fn(dev):
        x = torch.randn(3, 2, device=dev, requires_grad=True)
        host = x.numpy(force=True)
        host[0, 0] = 1e9  # a copy: the device tensor is untouched, as on CUDA
        matches = (x.argmax(dim=1) == torch.zeros(3, dtype=torch.long, device=dev))
        return host, float(x[0, 0]), matches.double().mean(), (x.double() * 2).dtype

    host, first, mean, dtype = run_on_fakegpu(fn)
    assert isinstance(host, np.ndarray) and host.shape == (3, 2) and first != 1e9
    assert mean.dtype == torch.float64 and 0.0 <= float(mean) <= 1.0 and dtype == torch.float64


def test_fakegpu_is_never_visited_by_auto_and_must_be_named(monkeypatch):
    monkeypatch.delenv(devices.DEVICES_ENV, raising=False)
    assert "fakegpu" not in devices.resolve_devices("auto") and "fakegpu" not in dlkit.test_devices()
    assert devices.resolve_devices("fakegpu") == ["cpu", "fakegpu"]
    with pytest.raises(ValueError, match="unknown device kinds"):
        devices.resolve_devices("cpu,tpu9")
