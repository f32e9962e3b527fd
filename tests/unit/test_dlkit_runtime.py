"""dlkit.devices, seeding, bench, hardware and plots."""

import random

import matplotlib
import numpy as np
import pytest
import torch

import dlkit
from dlkit import devices, hardware

matplotlib.use("Agg")


def test_cpu_is_always_a_test_device(monkeypatch):
    monkeypatch.setenv(devices.DEVICES_ENV, "cuda")
    assert dlkit.test_devices()[0] == "cpu"


def test_device_override_limits_and_validates(monkeypatch):
    monkeypatch.setenv(devices.DEVICES_ENV, "cpu")
    assert dlkit.test_devices() == ["cpu"]
    monkeypatch.setenv(devices.DEVICES_ENV, "cpu,gpu")
    with pytest.raises(ValueError, match="unknown device kinds \\['gpu'\\]"):
        dlkit.test_devices()


def test_auto_lists_what_torch_reports(monkeypatch):
    monkeypatch.delenv(devices.DEVICES_ENV, raising=False)
    expected = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    assert dlkit.test_devices()[: len(expected)] == expected
    assert dlkit.default_device() == dlkit.test_devices()[-1]


def test_tpu_detection_does_not_import_torch_xla(monkeypatch):
    import sys

    monkeypatch.delenv("TPU_NAME", raising=False)
    monkeypatch.delenv("COLAB_TPU_ADDR", raising=False)
    devices.tpu_present()
    dlkit.torch_devices()
    assert "torch_xla" not in sys.modules


def test_colab_detection_reads_the_environment(monkeypatch):
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    assert not dlkit.is_colab()
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab_20261101")
    assert dlkit.is_colab()


def test_seed_everything_repeats_python_numpy_and_torch():
    def draw():
        return random.random(), np.random.rand(), torch.rand(1).item()

    dlkit.seed_everything(123)
    first = draw()
    dlkit.seed_everything(123)
    assert draw() == first
    dlkit.seed_everything(124)
    assert draw() != first


def test_benchmark_measures_briefly_while_nbgrader_autogrades(monkeypatch):
    calls = []
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert dlkit.grading()
    timing = dlkit.benchmark(lambda: calls.append(1), warmup=3, repeats=7, number=10)
    assert len(calls) == 1 and len(timing.times) == 1, "while grading, one call is the whole measurement"
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    assert not dlkit.grading()


def test_benchmark_warms_up_and_reports_the_median():
    calls = []
    timing = dlkit.benchmark(lambda: calls.append(1), warmup=3, repeats=5, number=2, device="cpu")
    assert len(calls) == 3 + 5 * 2
    assert len(timing.times) == 5
    assert min(timing.times) <= timing.median <= max(timing.times)
    with pytest.raises(ValueError):
        dlkit.benchmark(lambda: None, repeats=0)


def test_gpu_peak_lookup_prefers_the_most_specific_name():
    assert hardware.gpu_peak_flops("NVIDIA A100-SXM4-40GB") == 19.5e12
    assert hardware.gpu_peak_flops("NVIDIA GeForce RTX 3090") == 35.6e12
    assert hardware.gpu_peak_flops("Tesla T4") == 8.1e12
    assert hardware.gpu_peak_flops("Some Future GPU") is None
    assert hardware.gpu_peak_flops("NVIDIA H100 PCIe", "bf16") == 756e12, "PCIe before the SXM default"
    assert hardware.gpu_peak_flops("NVIDIA L40S") == 91.6e12, "not the L4's"


def test_gpu_peaks_per_precision_are_the_tensor_core_spec_figures():
    h100 = "NVIDIA H100 80GB HBM3"
    peaks = [hardware.gpu_peak_flops(h100, p) for p in ("fp32", "tf32", "bf16", "fp16")]
    assert peaks == [67e12, 495e12, 989e12, 989e12]
    assert hardware.gpu_peak_flops("NVIDIA A100-SXM4-80GB", "tf32") == 156e12
    assert hardware.gpu_peak_flops("Tesla T4", "fp16") == 65e12
    assert hardware.gpu_peak_flops("Tesla T4", "bf16") is None, "Turing's tensor cores have no bf16"
    with pytest.raises(ValueError):
        hardware.gpu_peak_flops(h100, "fp8")


def test_cpu_peak_follows_cores_clock_and_vector_width(monkeypatch):
    monkeypatch.setattr(hardware, "_cpu_flags_and_mhz", lambda: ({"avx2", "fma"}, 3000.0))
    assert hardware.cpu_peak_flops(cores=4) == 4 * 3e9 * 32
    monkeypatch.setattr(hardware, "_cpu_flags_and_mhz", lambda: ({"avx512f", "avx2", "fma"}, None))
    assert hardware.cpu_peak_flops(cores=1) == 3e9 * 64
    assert dlkit.device_peak_flops("mps") is None


def test_plots_label_axes_and_series():
    ax = dlkit.line_plot([1, 2, 4], {"cpu": [1.0, 2.0, 3.0], "cuda": [2.0, 4.0, 8.0]}, xlabel="n", ylabel="GFLOP/s",
                         logx=True)
    assert [line.get_label() for line in ax.get_lines()] == ["cpu", "cuda"]
    assert ax.get_xlabel() == "n" and ax.get_ylabel() == "GFLOP/s" and ax.get_xscale() == "log"
    bars = dlkit.bar_plot(["a", "b"], [1.0, 2.5], ylabel="ms")
    assert [t.get_text() for t in bars.texts] == ["1", "2.5"]


def test_data_file_finds_shipped_files_and_lists_them_when_missing():
    init = dlkit.data_file("__init__.py")
    assert init.is_file() and init.parent.name == "data"
    with pytest.raises(FileNotFoundError, match="ships no dataset file 'nope.npz'"):
        dlkit.data_file("nope.npz")


def test_tf_devices_lists_the_cpu():
    assert any(name.endswith("CPU:0") for name in dlkit.tf_devices())


def test_cpu_peak_counts_physical_cores_not_hyperthreads():
    two_cores_four_threads = "\n\n".join(
        f"processor\t: {cpu}\nphysical id\t: 0\ncore id\t\t: {cpu % 2}\nflags\t\t: avx2 fma" for cpu in range(4))
    assert hardware.physical_cores(two_cores_four_threads, usable={0, 1, 2, 3}) == 2
    assert hardware.physical_cores(two_cores_four_threads, usable={0, 2}) == 1, "two threads of one core"
    assert hardware.physical_cores("processor\t: 0\n\nprocessor\t: 1", usable={0, 1}) == 2, "no topology: logical"
