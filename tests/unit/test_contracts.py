"""Contracts as data (autograder/contracts/, autograder/verify/contracts.py): an exercise's domain is a list of edges,
and the recorder says which of them the hidden tests' calls reach. Here on values and on a two-cell notebook: a test
of typical inputs leaves gaps, a test over the domain closes them (`make contracts` does the eight notebooks)."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import numpy as np
import pytest
import torch

from autograder.paths import REPO
from autograder.verify.contracts import CONTRACTS, Calls, check, describe, unknown_edges

from .notebooks import answer_cell, graded_cell, notebook

EDGE_CASES = [
    (np.float64(3.0), ["0-d", "numpy", "float64"], ["empty", "non-contiguous"]),
    (np.zeros((3, 0)), ["empty"], ["0-d", "one element", "exact zero"]),
    (np.arange(12.0).reshape(3, 4).T, ["non-contiguous", "exact zero"], ["ties", "negative"]),
    (np.array([[2.0, 2.0, -1.0]]), ["one row", "ties", "negative"], ["nan"]),
    (np.array([np.nan, np.inf, 1e4]), ["nan", "inf", "max|x| >= 1000"], ["max|x| >= 1e5"]),
    (np.array([1e-40, 1.0]), ["min|x| <= 1e-30"], ["min|x| <= 1e-50"]),
    (torch.ones(2, 3, 4, requires_grad=True), ["torch", "float32", "requires grad", "3 or more axes"], ["accelerator"]),
    (torch.tensor([1, 2], dtype=torch.int32), ["integer dtype", "int32"], ["float32", "0-d"]),
    (7, ["python int"], ["python float", "0-d", "exact zero", "1 axis"]),
    (np.ones(3), ["1 axis"], ["one row"]),
    (torch.nn.Linear(2, 3), ["instance of Module", "instance of Linear", "training mode"],
     ["instance of Sequential", "torch", "eval mode"]),
    (torch.nn.Dropout().eval(), ["eval mode"], ["training mode"]),
    (0.0, ["python float", "exact zero"], ["python int"]),
]


@pytest.mark.parametrize("value, reached, missed", EDGE_CASES)
def test_each_edge_says_what_a_value_reaches(value, reached, missed):
    calls = Calls()
    calls.arguments["x"].append(describe(value))
    contract = {"f": {"text": "f(x)", "f(x)": reached + missed}}
    met = {finding.edge: finding.met for finding in check(contract, {"f": {"f": calls}})}
    assert {edge for edge in reached if not met[edge]} == set(), f"{value!r} should reach {reached}"
    assert {edge for edge in missed if met[edge]} == set(), f"{value!r} should not reach {missed}"


def test_a_simulated_accelerator_tensor_is_described_from_its_data():
    from dlkit import fakegpu

    with fakegpu.active() as device:
        tensor = torch.tensor([[1.0, float("nan")], [3.0, 3.0]], device=device).T
    value = describe(tensor)
    assert (value.accelerator, value.contiguous, value.nan, value.shape) == (True, False, True, (2, 2))


def test_unknown_edges_keys_and_functions_are_findings_not_silence():
    calls = Calls()
    calls.arguments["x"].append(describe(np.ones(3)))
    contract = {"f": {"text": "", "f(x)": ["one elemnt"], "f x": ["empty"], "g(x)": ["empty"], "f()": ["fifth call"]}}
    assert [f.met for f in check(contract, {"f": {"f": calls}})] == [None, None, None, None]
    assert unknown_edges(contract) == [("f", "f(x)", "one elemnt"), ("f", "f x", "empty"), ("f", "f()", "fifth call")]


def test_every_notebook_has_a_contract_in_the_vocabulary():
    """A contract for each notebook, each edge a word the tool knows (what the calls reach is `make contracts`)."""
    import tomllib

    from autograder.course import assignments

    assert sorted(p.stem for p in CONTRACTS.glob("*.toml")) == sorted(assignments())
    for path in CONTRACTS.glob("*.toml"):
        contract = tomllib.loads(path.read_text())
        assert unknown_edges(contract) == [], f"{path.name}: words outside the vocabulary"
        for exercise, entry in contract.items():
            assert entry.get("text"), f"{path.name}: {exercise} has no text saying what its domain is"


def recorded(tmp_path, test_source: str) -> dict:
    nb = notebook(answer_cell("clip", "def clip(x, low):\n    return x.clip(min=low)\n"),
                  graded_cell("test_clip", test_source))
    path = tmp_path / "fixture.ipynb"
    nbformat.write(nb, path)
    (tmp_path / "contract.toml").write_text(
        '[clip]\ntext = "clip(x, low): any array, values below low raised to it"\n'
        '"clip(x)" = ["0-d", "empty", "non-contiguous", "nan"]\n"clip(low)" = ["python float"]\n'
        '"clip()" = ["second call"]\n')
    script = ("import json, tomllib; from pathlib import Path\n"
              "from autograder.verify.contracts import check, record_notebook\n"
              f"contract = tomllib.loads(Path({str(tmp_path / 'contract.toml')!r}).read_text())\n"
              f"found = check(contract, record_notebook(Path({str(path)!r}), set(contract)))\n"
              "print(json.dumps({f.key + ' ' + f.edge: f.met for f in found}))")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_typical_inputs_leave_gaps_and_a_test_over_the_domain_closes_them(tmp_path):
    typical = recorded(tmp_path, "import numpy as np\nassert (clip(np.array([1.0, -2.0]), 0.0) == [1.0, 0.0]).all()")
    assert [key for key, met in typical.items() if not met] == [
        "clip(x) 0-d", "clip(x) empty", "clip(x) non-contiguous", "clip(x) nan", "clip() second call"]
    domain = recorded(tmp_path, "import numpy as np\n"
                                "for x in (np.float64(-1.0), np.zeros(0), np.ones((3, 2)).T, np.array([np.nan])):\n"
                                "    np.testing.assert_array_equal(clip(x, 0.0), np.maximum(x, 0.0))")
    assert all(domain.values()), domain


def test_methods_static_methods_and_functions_are_recorded_and_put_back():
    from autograder.verify.contracts import Recorder, instrument

    class Square(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return 2 * x * grad

    def twice(x):
        return 2 * x

    space, recorder, forward = {"Square": Square, "twice": twice}, Recorder(), vars(Square)["forward"]
    restore = instrument(space, ["Square", "twice"], recorder)
    recorder.start_test()
    x = torch.ones(2, requires_grad=True)
    Square.apply(space["twice"](x)).sum().backward()
    recorder.active = False
    restore()
    assert sorted(recorder.calls) == ["Square.backward", "Square.forward", "twice"]
    assert space["twice"] is twice and vars(Square)["forward"] is forward, "the originals are back"
    assert "ctx" in recorder.calls["Square.forward"].arguments
