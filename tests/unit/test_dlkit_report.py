"""dlkit.report_runtime: what the release notebooks' setup cell prints, cheaply and without failing."""

import os
import subprocess
import sys

import pytest

from dlkit import runtime


def fake_nvidia_smi(tmp_path, monkeypatch, output: str, status: int = 0) -> None:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{output}'\nexit {status}\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")


def test_gpus_are_read_from_nvidia_smi(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "Tesla T4\\nNVIDIA A100-SXM4-40GB\\n")
    assert runtime.gpu_names() == ["Tesla T4", "NVIDIA A100-SXM4-40GB"]
    fake_nvidia_smi(tmp_path, monkeypatch, "NVIDIA-SMI has failed\\n", status=9)
    assert runtime.gpu_names() == [], "a driver that cannot answer means no usable GPU"


def test_a_gpu_notebook_without_a_gpu_says_how_to_switch_in_colab(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "", status=9)
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-20261101")
    text = runtime.runtime_summary("gpu")
    assert "runtime: Google Colab" in text and "devices: CPU\n" in text
    assert "Runtime > Change runtime type" in text and "also works on the CPU" in text


def test_the_summary_matches_what_the_runtime_has(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, "Tesla T4\\n")
    monkeypatch.delenv("COLAB_RELEASE_TAG", raising=False)
    text = runtime.runtime_summary("gpu")
    assert "runtime: not Colab" in text and "devices: CPU, GPU Tesla T4" in text and "has one: good" in text
    assert "torch " in text, "installed library versions are listed"
    assert "needs no accelerator" in runtime.runtime_summary("cpu")
    with pytest.raises(ValueError, match="expected one of"):
        runtime.runtime_summary("quantum")


def test_a_cpu_notebook_on_a_colab_accelerator_mentions_the_quota():
    assert "quota" in runtime.advice("cpu", ["Tesla T4"], tpu=False, colab=True)
    assert "TPU" in runtime.advice("tpu", [], tpu=False, colab=True)


def test_the_report_imports_neither_torch_nor_tensorflow():
    code = ("import sys, dlkit; dlkit.report_runtime('gpu'); "
            "print(sorted(m for m in ('torch', 'tensorflow', 'torch_xla') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("[]"), done.stdout
