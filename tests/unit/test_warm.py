"""Warm kernels: what a zygote preloads (tests/pipeline/test_warm.py grades with them)."""

from __future__ import annotations

from autograder.course import assignments
from autograder.execution import warm


def test_preload_modules_are_the_notebooks_top_level_imports():
    modules = warm.preload_modules(assignments()["01_tensors"])
    assert {"torch", "numpy", "dlkit", "ipykernel.kernelapp"} <= set(modules)
    assert "tensorflow" not in modules
    assert "torch._dynamo" in modules and "onnxscript" not in modules, "what torch, not ONNX, imports on first use"
    assert "tensorflow" in warm.preload_modules(assignments()["05_tf1_vs_tf2"])
    whole_class = warm.preload_modules(assignments()["01_tensors"], assignments()["05_tf1_vs_tf2"])
    assert set(modules) | {"tensorflow"} <= set(whole_class), "one zygote serves every assignment of the class"
