"""The judge (autograder/judge/) in a real kernel: test cells run in the grader's process, student code in the kernel.

One kernel through GuardedExecute, as grading runs it: answer cells execute in the kernel, test cells
the judge decides. Each test below reads one cell of that run: the verdicts come from comparisons the
kernel cannot reach, whatever the submission patched, printed, returned or replied.
"""

from __future__ import annotations

import sys
import time

import pytest
from traitlets.config import Config

from autograder.grading.markers import METADATA_KEY
from autograder.grading.preprocessors import GuardedExecute
from autograder.judge.preprocess import JUDGED
from autograder.judge.session import free_names

from .notebooks import answer_cell, graded_cell, notebook
from .test_guarded_execute import GRADER_CELL, errors, text

STUDENT = '''
import math, numpy as np, torch, dlkit

def flops(n, k, m):
    return 2 * n * k * m

def wrong_flops(n, k, m):
    return n * k * m

class Liar(int):
    def __eq__(self, other):
        return True
    __hash__ = int.__hash__

def lying_flops(n, k, m):
    return Liar(0)

def numpy_int_flops(n, k, m):
    return np.int64(2 * n * k * m)

def overwrites(x):
    x.mul_(0)
    return x.sum()

def strict(x):
    if x < 0:
        raise ValueError("negative input")
    return math.sqrt(x)

def loops_forever(x):
    while True:
        pass

def loud(x):
    for _ in range(2000):
        print("x" * 1000)
    return x + 1

def relu(t):
    return t.clamp_min(0)

def relu_on_cpu(t):
    return t.cpu().clamp_min(0)

def numeric_gradient(f, x, h=1e-5):
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        old = x[i]
        x[i] = old + h
        up = f(x)
        x[i] = old - h
        down = f(x)
        x[i] = old
        grad[i] = (up - down) / (2 * h)
    return grad

def calls_back_with_an_object(f):
    return f(object())

class Counter:
    def __init__(self):
        self.n = 0

    def step(self):
        self.n += 1
        return self.n

class LyingTensor:
    def min(self):
        return 0.0

def lying_distances(x):
    return LyingTensor()

class MyReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp_min(0)

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        return grad_output * (x > 0)

def detached_loss(w):
    return (w ** 2).sum().detach()

def replaces_storage(w):
    w.data = w.data * 0

def leaves_float64(x):
    torch.set_default_dtype(torch.float64)
    torch.set_grad_enabled(False)
    return 2 * x

def default_dtype_name():
    return str(torch.get_default_dtype()) + " " + str(torch.is_grad_enabled())

def reseeds_unasked(x):
    torch.manual_seed(0)
    return x

def seeded_draw(n, seed):
    torch.manual_seed(seed)
    return torch.rand(n).tolist()

def toy_draw(seed=1):
    torch.manual_seed(seed)
    return torch.rand(2).tolist()

def numpy_reseeds(x):
    np.random.seed(0)
    return x

class DtypeBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, grad_output):
        torch.set_default_dtype(torch.float64)
        return 2 * grad_output

import dlkit.devices
dlkit.devices.tf_kinds_present = lambda: ["xla", "bogus"]  # TensorFlow's device kinds, as this kernel reports them

import this as zen  # a module the instructor's notebook never imports: the judge must not import it for a name

# Everything an in-kernel checker would rely on, replaced: none of it is the judge's.
math.isclose = lambda *a, **k: True
np.allclose = torch.allclose = lambda *a, **k: True
dlkit.assert_close = dlkit.checks.assert_close = lambda *a, **k: None
'''

TESTS = {
    "test_right": ("assert flops(2, 3, 4) == 48\nimport random\nn = random.randint(1, 99)\n"
                   "assert flops(n, 1, 1) == 2 * n"),
    "test_wrong": "assert wrong_flops(2, 3, 4) == 48, f'expected 48, got {wrong_flops(2, 3, 4)}'",
    "test_liar": "assert lying_flops(2, 3, 4) == 48, 'a lying int'",
    "test_numpy_int": "got = numpy_int_flops(2, 3, 4)\nassert type(got) is int, f'an int, got {type(got).__name__}'",
    "test_aliasing": ("import torch\nx = torch.ones(3)\ntotal = overwrites(x)\n"
                      "assert float(total) == 0.0\n"
                      "assert x.tolist() == [1.0, 1.0, 1.0], 'the argument was overwritten'"),
    "test_exception": ("try:\n    strict(-1.0)\nexcept ValueError:\n    pass\n"
                       "else:\n    raise AssertionError('no error')\n"
                       "import math\nassert math.isclose(strict(4.0), 2.0)\nassert not math.isclose(strict(9.0), 2.0)"),
    "test_patched_checks": "import dlkit, torch\ndlkit.assert_close(wrong_flops(2, 3, 4), 48, name='flops')",
    "test_timeout": "loops_forever(1)",
    "test_after_timeout": "assert flops(1, 1, 1) == 2",
    "test_loud": "assert loud(1) == 2",
    "test_devices": ("import dlkit, torch\ndef check(kind):\n"
                     "    t = torch.randn(5, device=dlkit.as_torch_device(kind))\n"
                     "    out = relu_on_cpu(t)\n    dlkit.assert_same_placement(out, t, name='relu')\n"
                     "dlkit.check_on_devices(check, kinds=['cpu', 'fakegpu'])"),
    "test_tf_devices": ("import dlkit\nseen = []\n"
                        "dlkit.check_on_devices(seen.append, kinds=['cpu', 'cuda', 'xla'], framework='tf')\n"
                        "assert seen == ['cpu', 'xla'], seen"),
    "test_handles": "c = Counter()\nassert (c.step(), c.step(), c.step()) == (1, 2, 3) and c.n == 3",
    "test_opaque": "got = lying_distances(1)\nassert got.min() >= 0",
    "test_backward": ("import torch\nx = torch.randn(5, dtype=torch.float64, requires_grad=True)\n"
                      "w = torch.randn(5, dtype=torch.float64)\n(MyReLU.apply(x) * w).sum().backward()\n"
                      "assert torch.equal(x.grad, w * (x.detach() > 0))\n"
                      "assert torch.autograd.gradcheck(MyReLU.apply, (torch.tensor([-1.5, 0.7], dtype=torch.float64,"
                      " requires_grad=True),))"),
    "test_detached": ("import torch\nw = torch.randn(3, requires_grad=True)\nloss = detached_loss(w)\n"
                      "assert not loss.requires_grad\ntry:\n    loss.backward()\nexcept RuntimeError:\n    pass\n"
                      "else:\n    raise AssertionError('a detached loss has no graph')"),
    "test_storage": ("import torch\nw = torch.ones(3)\nwhere = w.data_ptr()\nreplaces_storage(w)\n"
                     "assert w.data_ptr() != where and w.tolist() == [0.0, 0.0, 0.0]"),
    "test_ops": ("import dlkit, torch\n_, small = dlkit.dispatched_ops(relu, torch.randn(10))\n"
                 "_, large = dlkit.dispatched_ops(relu, torch.randn(1000))\n"
                 "assert small == large == 1, (small, large)"),
    "test_missing": "assert never_defined(1) == 1",
    "test_left_state": "assert leaves_float64(2.0) == 4.0",
    "test_after_left_state": "assert default_dtype_name() == 'torch.float32 True', default_dtype_name()",
    "test_reseeds": "assert reseeds_unasked(1) == 1",
    "test_seeded_with_its_argument": ("assert seeded_draw(3, 7) == seeded_draw(3, 7)\n"
                                      "assert seeded_draw(2, 1234) == seeded_draw(2, 1234)"),
    "test_seeded_with_its_default": "assert toy_draw() == toy_draw()",
    "test_numpy_reseeds": "assert numpy_reseeds(1) == 1",
    "test_backward_left_state": ("import torch\nx = torch.randn(3, requires_grad=True)\n"
                                 "DtypeBackward.apply(x).sum().backward()"),
    "test_after_backward_left_state": "assert default_dtype_name() == 'torch.float32 True', default_dtype_name()",
    "test_foreign_module": "assert zen is not None",
    "test_in_kernel": ("import dlkit, torch\n@dlkit.in_kernel\ndef trained(n):\n    c = Counter()\n"
                       "    for _ in range(n):\n        c.step()\n    return {'n': c.n, 'kind': type(c).__name__}\n"
                       "got = trained(4)\nassert got == {'n': 4, 'kind': 'Counter'}, got"),
    "test_callback": ("import numpy as np, dlkit\nx = np.random.randn(3, 4)\nbefore = x.copy()\n"
                      "grad = numeric_gradient(lambda v: float(np.sum(v ** 2)), x)\n"
                      "dlkit.assert_close(grad, 2 * before, rtol=1e-4, atol=1e-6)\nassert np.array_equal(x, before)"),
    "test_callback_gets_no_objects": ("got = calls_back_with_an_object(lambda v: type(v).__name__)\n"
                                      "assert got == 'Remote', f'the judge function was given a {got}'"),
    "test_agent_replaced": ("assert flops(2, 3, 4) == 48"),
    "test_after_agent_replaced": "assert flops(2, 3, 4) == 48",
}
#: Cells the kernel runs between the test cells: the submission replaces the judge's agent before this test.
BREAKS_AGENT = ("import dlkit.agent\n"
                "dlkit.agent.handle = lambda request: dlkit.agent._Raw('{\"ok\": 48, \"changed\": {}}')")


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    cells = [answer_cell("answers", GRADER_CELL), answer_cell("student", STUDENT)]
    for grade_id, source in TESTS.items():
        if grade_id == "test_agent_replaced":
            cells.append(answer_cell("breaks_agent", BREAKS_AGENT))
        cells.append(graded_cell(grade_id, "raise AssertionError('the kernel ran the test cell')"))
    resources = {"metadata": {"path": str(tmp_path_factory.mktemp("judged"))},
                 JUDGED: {"modules": ["math", "numpy", "torch", "dlkit", "random"],
                          "cells": {g: {"seed": 7, "source": s} for g, s in TESTS.items()}}}
    config = Config()
    config.Execute.timeout = 5
    config.GuardedExecute.stuck_grace = 1.0
    config.GuardedExecute.notebook_timeout = 120
    start = time.monotonic()
    nb, _ = GuardedExecute(config=config).preprocess(notebook(*cells), resources)
    by_id = {c.metadata["nbgrader"]["grade_id"]: c for c in nb.cells}
    return by_id, time.monotonic() - start


def failure(judged, grade_id: str) -> str:
    found = errors(judged[0][grade_id])
    return " ".join(f"{name}: {value}" for name, value in found)


def test_a_right_answer_passes_and_the_kernel_never_runs_the_test_cell(judged):
    cell = judged[0]["test_right"]
    assert errors(cell) == [], errors(cell)
    assert "[dlkit-seed] 7" in text(cell), "the seed a TA needs to draw the same inputs is printed"


def test_a_wrong_answer_fails_with_the_tests_own_message(judged):
    assert failure(judged, "test_wrong") == "AssertionError: expected 48, got 24"


def test_patched_comparisons_in_the_kernel_change_nothing(judged):
    assert "flops is off" in failure(judged, "test_patched_checks")
    assert failure(judged, "test_exception") == "", "math.isclose is the judge's own, so 3 is not close to 2"


def test_an_object_whose_methods_lie_stays_in_the_kernel(judged):
    assert failure(judged, "test_liar") == "AssertionError: a lying int"


def test_exact_types_come_back(judged):
    assert failure(judged, "test_numpy_int") == "AssertionError: an int, got int64"


def test_an_argument_overwritten_in_the_kernel_is_overwritten_in_the_judge(judged):
    assert failure(judged, "test_aliasing") == "AssertionError: the argument was overwritten"


def test_a_call_past_the_time_limit_fails_its_test_and_the_next_one_runs(judged):
    assert "past the time limit" in failure(judged, "test_timeout")
    assert failure(judged, "test_after_timeout") == ""


def test_what_student_code_prints_during_a_call_goes_nowhere(judged):
    cell = judged[0]["test_loud"]
    assert errors(cell) == [] and len(text(cell)) < 100


def test_each_device_is_recorded_by_the_judge(judged):
    cell = judged[0]["test_devices"]
    devices = cell.metadata[METADATA_KEY]["devices"]
    assert devices["cpu"]["status"] == "passed"
    assert devices["fakegpu"]["status"] == "failed" and "device" in devices["fakegpu"]["message"]


def test_tensorflow_devices_are_asked_of_the_kernel_not_placed_in_the_judge(judged):
    """TF's kinds come from the kernel (the CPU always, unknown names dropped); the judge imports no TensorFlow
    to place a check (xla would need a TPU strategy here), since the student's TF code runs in the kernel."""
    assert failure(judged, "test_tf_devices") == ""
    devices = judged[0]["test_tf_devices"].metadata[METADATA_KEY]["devices"]
    assert {kind: d["status"] for kind, d in devices.items()} == {"cpu": "passed", "cuda": "skipped", "xla": "passed"}


def test_objects_the_students_classes_build_run_in_the_kernel(judged):
    assert failure(judged, "test_handles") == ""


def test_what_a_function_returns_that_is_not_plain_data_cannot_answer_for_itself(judged):
    assert "not a value the grader can check" in failure(judged, "test_opaque")


def test_backpropagation_runs_the_students_backward_in_their_kernel(judged):
    assert failure(judged, "test_backward") == ""
    assert failure(judged, "test_detached") == ""


def test_an_argument_given_new_storage_has_new_storage_in_the_judge(judged):
    assert failure(judged, "test_storage") == ""


def test_operations_are_counted_in_the_kernel(judged):
    assert failure(judged, "test_ops") == ""


def test_a_helper_marked_in_kernel_runs_there_and_returns_plain_data(judged):
    assert failure(judged, "test_in_kernel") == ""


def test_a_name_the_notebook_lacks_fails_as_python_would(judged):
    assert failure(judged, "test_missing") == "NameError: name 'never_defined' is not defined"


def test_a_module_the_notebook_never_imports_is_not_imported_by_the_judge(judged):
    assert failure(judged, "test_foreign_module") == "NameError: name 'zen' is not defined"
    assert "this" not in sys.modules, "the judge (this process) imported a module a submission named"


def test_functions_of_the_judge_run_in_the_judge_when_student_code_calls_them(judged):
    assert failure(judged, "test_callback") == ""
    assert failure(judged, "test_callback_gets_no_objects") == ""


def test_a_call_that_leaves_global_state_changed_fails_and_the_kernel_gets_it_back(judged):
    assert "changed global state" in failure(judged, "test_left_state")
    assert "torch's default dtype: torch.float32 before the call, torch.float64 after it" in failure(
        judged, "test_left_state")
    assert not errors(judged[0]["test_after_left_state"]), failure(judged, "test_after_left_state")


def test_a_call_that_reseeds_a_global_generator_with_a_seed_it_was_not_given_fails(judged):
    assert "changed global state" in failure(judged, "test_reseeds")
    assert ("torch's global random generator: reseeded with 0 inside the call, a seed it was not given"
            in failure(judged, "test_reseeds"))
    assert ("NumPy's global random generator (np.random): reseeded with 0 inside the call, a seed it was not given"
            in failure(judged, "test_numpy_reseeds"))


def test_a_call_that_seeds_with_its_own_argument_or_default_passes(judged):
    """`make_model(n_in, n_out, seed)` and `toy_model(seed=1)` of the reference notebooks seed torch themselves."""
    assert failure(judged, "test_seeded_with_its_argument") == ""
    assert failure(judged, "test_seeded_with_its_default") == ""


def test_a_backward_that_leaves_global_state_changed_fails_and_the_kernel_gets_it_back(judged):
    found = failure(judged, "test_backward_left_state")
    assert "the submission's backward changed global state" in found, found
    assert "torch's default dtype: torch.float32 before the call, torch.float64 after it" in found, found
    assert not errors(judged[0]["test_after_backward_left_state"]), failure(judged, "test_after_backward_left_state")


#: Run in a fresh interpreter (TensorFlow would take seconds to import into a kernel, and stays out of pytest's):
#: the kernel's agent on calls that change TensorFlow's global state, and on one that reseeds TensorFlow.
TF_AGENT = """
import os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import json
import tensorflow as tf
from dlkit import agent, wire

kept = []

def flips():
    tf.config.run_functions_eagerly(True)

def enters():
    kept.append(tf.Graph().as_default())
    kept[-1].__enter__()

def disables():
    tf.compat.v1.disable_eager_execution()

def resets():
    tf.compat.v1.reset_default_graph()

def reseeds():
    tf.random.set_seed(0)

def seeded(seed):
    tf.random.set_seed(seed)

def builds_its_own_graph():
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(3)
        tf.constant(1.0)

def repairs():  # what 05's test_tf1_leaves_tf2_working does in the kernel after a submission switched eager off
    from tensorflow.python.framework import ops

    ops._default_graph_stack._global_default_graph = None
    tf.compat.v1.enable_eager_execution()

def state():
    v = tf.Variable([1.0, 2.0])
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(v * v)
    return [tf.executing_eagerly(), tf.config.functions_run_eagerly(), tape.gradient(total, v).numpy().tolist(),
            tf.compat.v1.get_default_graph() is graph]

tf.random.set_seed(5)
graph = tf.compat.v1.get_default_graph()
out = {}
for fn, args in ((flips, []), (enters, []), (disables, []), (resets, []), (reseeds, []), (seeded, [11]),
                 (builds_its_own_graph, [])):
    reply = agent._call({"target": agent._as_handle(fn)["v"], "args": wire.Encoder().encode(args),
                         "kwargs": wire.Encoder().encode({})})
    out[fn.__name__] = [reply["left_state"], state()]
tf.compat.v1.disable_eager_execution()  # by the notebook itself, outside any call
reply = agent._call({"target": agent._as_handle(repairs)["v"], "args": wire.Encoder().encode([]),
                     "kwargs": wire.Encoder().encode({})})
out["repairs"] = [reply["left_state"], state()[:3]]
print(json.dumps(out), flush=True)
os._exit(0)  # TensorFlow's own teardown takes seconds
"""


def test_a_call_that_changes_tensorflows_global_state_is_reported_and_put_back():
    pytest.importorskip("tensorflow")
    import json
    import subprocess

    run = subprocess.run([sys.executable, "-c", TF_AGENT], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    got = json.loads(run.stdout.strip().splitlines()[-1])
    as_found = [True, False, [2.0, 4.0], True]  # eager, run_functions_eagerly off, a tape works, the same graph
    assert got["flips"] == [["tf.config.functions_run_eagerly(): False before the call, True after it"], as_found]
    assert got["enters"] == [["TensorFlow's eager execution: on before the call, off after it",
                              "TensorFlow's default graph: a graph entered (graph.as_default()) inside the call and "
                              "never left"], as_found]
    assert got["disables"] == [["TensorFlow's eager execution: on before the call, off after it"], as_found]
    assert got["resets"] == [["TensorFlow's default graph: the global default graph replaced "
                              "(tf.compat.v1.reset_default_graph) inside the call"], as_found]
    assert got["reseeds"] == [["TensorFlow's global seed: reseeded with 0 inside the call, a seed it was not given"],
                              as_found]
    assert got["seeded"] == [[], as_found] and got["builds_its_own_graph"] == [[], as_found]
    assert got["repairs"] == [[], as_found[:3]], "switching eager mode back on is a repair, neither reported nor undone"


def test_a_call_that_reseeds_python_or_numpy_is_judged_by_the_seeds_it_was_given():
    """In this process, without a kernel: the agent's own handling of each kind of reseeding."""
    import random

    import numpy as np
    import torch

    from dlkit import agent, wire

    def left(fn, *args, **kwargs):
        request = {"target": agent._as_handle(fn)["v"], "args": wire.Encoder().encode(list(args)),
                   "kwargs": wire.Encoder().encode(kwargs)}
        return agent._call(request)["left_state"]

    def save_and_restore():  # reseeds for a while and puts the generators back as it found them
        state, py_state = np.random.get_state(), random.getstate()
        np.random.seed(3)
        random.seed(4)
        np.random.set_state(state)
        random.setstate(py_state)

    def restores_a_reseeded_state():
        np.random.seed(3)
        np.random.set_state(np.random.get_state())

    def seeds_every_rank(seeds, rank=1):
        torch.manual_seed(seeds[rank])
        np.random.seed(seeds[rank])

    torch_state, np_state, py_state = torch.get_rng_state(), np.random.get_state(), random.getstate()
    np_seed, py_seed = np.random.seed, random.seed
    try:
        assert left(save_and_restore) == []
        assert left(seeds_every_rank, [3, 4]) == [] and left(seeds_every_rank, seeds=[5, 6], rank=0) == []
        assert left(lambda seed=-1: torch.manual_seed(seed)) == [], "torch reads -1 as 2**64 - 1"
        assert left(restores_a_reseeded_state) == [
            "NumPy's global random generator (np.random): reseeded with 3 inside the call, a seed it was not given"]
        assert left(lambda: random.seed()) == [
            "Python's global random generator (random): reseeded with None inside the call, a seed it was not given"]
        assert left(lambda: np.random.set_state(("MT19937", np.arange(624, dtype=np.uint32), 0, 0, 0.0))) == [
            "NumPy's global random generator (np.random): its state replaced (set_state) inside the call with a state "
            "it was not given"]
        assert left(torch.seed)[0].startswith("torch's global random generator: reseeded with ")
        assert np.random.seed is np_seed and random.seed == py_seed, "the originals are back"
    finally:
        torch.set_rng_state(torch_state)
        np.random.set_state(np_state)
        random.setstate(py_state)


def test_a_replaced_agent_gets_no_points(judged):
    """The submission answers every request with 48: the resolve request gets no names, so the test fails."""
    assert "RefusedReply" in failure(judged, "test_agent_replaced")
    assert "RefusedReply" in failure(judged, "test_after_agent_replaced")


def test_free_names_are_what_the_cell_reads_and_does_not_define():
    source = "import numpy as np\ndef f(a):\n    return g(a) + np.pi\nx = [h(y) for y in range(3)]\nprint(f(x), z)"
    assert free_names(source) == ["g", "h", "z"]


def test_a_call_that_writes_files_where_its_arguments_do_not_point_fails(tmp_path, monkeypatch):
    """In this process, without a kernel: a file the call creates or deletes in the working folder is reported
    unless an argument names it (or the folder it goes in, or a prefix of it: ONNX's external `.data` file)."""
    import time
    from pathlib import Path

    from dlkit import agent, wire

    def left(fn, *args):
        request = {"target": agent._as_handle(fn)["v"], "args": wire.Encoder().encode(list(args)),
                   "kwargs": wire.Encoder().encode({})}
        return agent._call(request)["left_state"]

    def export(path):
        Path(path).parent.mkdir(exist_ok=True)
        Path(path).write_bytes(b"model")
        Path(f"{path}.data").write_bytes(b"weights")

    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("the student's own file")
    assert left(export, str(tmp_path / "exports" / "model.onnx")) == []
    assert left(export, "model.onnx") == []
    assert left(lambda: Path(".cache").mkdir()) == [], "hidden folders are the kernel's caches"
    time.sleep(0.15)  # the folder's listing is now old enough to be reused: the call must still be seen by its mtime
    assert left(lambda: export("hard-coded.onnx")) == [
        "files in the working folder: 'hard-coded.onnx' created, 'hard-coded.onnx.data' created inside the call, "
        "at paths none of its arguments names"]
    assert left(lambda: Path("notes.txt").unlink()) == [
        "files in the working folder: 'notes.txt' deleted inside the call, at paths none of its arguments names"]
