"""dlkit.integrity in a real IPython shell, fresh process: each tampering vector voids the test, honest code does not.

No grading run: the script snapshots, runs a "student" cell, then a test cell bracketed the way
the grader brackets it (autograder.grading.preprocessors.GuardTests), and reports what the check said.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from autograder.paths import REPO

# Runs in the subprocess: one shell, one snapshot, then each case in order; prints one JSON line per case.
SCRIPT = """
import json, sys
from IPython.core.interactiveshell import InteractiveShell
from dlkit import integrity
shell = InteractiveShell.instance()
shell.run_cell("import dlkit.integrity\\ndlkit.integrity.snapshot(['numpy', 'torch', 'torch.nn.functional', 'dlkit'])")
cases = json.loads(sys.argv[1])
for student, test in cases:
    student_error = shell.run_cell(student).error_in_exec
    source = "\\n".join([integrity.request("before", "t", ("range", "len")), test,
                         integrity.request("after", "t", ("range", "len"), "ab12")])
    error = shell.run_cell(source).error_in_exec
    print("RESULT " + json.dumps({"student_error": repr(student_error) if student_error else None,
                                  "name": type(error).__name__ if error else None,
                                  "message": str(error) if error else ""}))
"""


def check(*cases: tuple[str, str]) -> list[dict]:
    """Run (student cell, test cell) pairs in one fresh shell; the check's verdict for each."""
    pairs = [(textwrap.dedent(s), textwrap.dedent(t)) for s, t in cases]
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(pairs)],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(results) == len(cases), proc.stdout[-3000:] + proc.stderr[-3000:]
    return results


TEST = "import numpy as np, torch, dlkit\ndlkit.assert_close(torch.ones(3), np.ones(3))"

VECTORS = {
    "tensor method": ("import torch\ntorch.Tensor.numpy = lambda self, *a, **k: None", "torch.Tensor.numpy was added"),
    "tensor python method": ("import torch\ntorch.Tensor.__array__ = lambda self, *a, **k: None",
                             "torch.Tensor.__array__ was replaced"),
    "tensor dunder": ("import torch\ntorch.Tensor.__eq__ = lambda self, other: True", "torch.Tensor.__eq__ was added"),
    "module comparison": ("import numpy\nnumpy.allclose = lambda *a, **k: True", "numpy.allclose was replaced"),
    "dlkit check": ("import dlkit.checks\ndlkit.checks.np = None", "dlkit.checks.np was replaced"),
    "function code": ("import dlkit.checks\ndlkit.checks.assert_close.__code__ = (lambda *a, **k: None).__code__",
                      "the code of dlkit.checks.assert_close was replaced"),
    "code swapped and put back": ("import dlkit.checks\nf = dlkit.checks.rel_error\nc = f.__code__\n"
                                  "f.__code__ = (lambda *a: 0.0).__code__\nf.__code__ = c",
                                  "the code of dlkit.checks.rel_error was replaced"),
    "torch rng": ("import torch\ntorch.randn = torch.ones", "torch.randn was replaced"),
    "numpy rng": ("import numpy\nnumpy.random.default_rng = lambda *a: None", "numpy.random.default_rng was replaced"),
    "random": ("import random\nrandom.random = lambda: 0.5", "random.random was replaced"),
    "random class": ("import random\nrandom.Random.randint = lambda self, a, b: a",
                     "random.Random.randint was replaced"),
    "sys.modules": ("import sys, types\nsys.modules['numpy'] = types.ModuleType('numpy')",
                    "sys.modules['numpy'] was replaced"),
    "builtin": ("import builtins\nbuiltins.sorted = lambda *a, **k: []", "builtins.sorted was replaced"),
    "import hook": ("import builtins\nbuiltins.__import__ = builtins.__import__.__call__",
                    "builtins.__import__ was replaced"),
    "meta path": ("import sys\nclass F:\n    def find_spec(self, *a): return None\nsys.meta_path.insert(0, F())",
                  "sys.meta_path was changed"),
    "trace": ("import sys\nsys.settrace(lambda *a: None)", "sys.gettrace() was replaced"),
    "profile": ("import threading\nthreading.setprofile(lambda *a: None)", "threading.getprofile() was replaced"),
    "shell method": ("get_ipython().showtraceback = lambda *a, **k: None", "get_ipython().showtraceback was replaced"),
    "custom exception handler": ("get_ipython().set_custom_exc((Exception,), lambda *a, **k: None)",
                                 "set_custom_exc was used"),
    "ast transformer": ("import ast\nclass Drop(ast.NodeTransformer):\n    def visit_Assert(self, node): return None\n"
                        "get_ipython().ast_transformers.append(Drop())", "ast_transformers was changed"),
    "shadowed builtin": ("def range(*a):\n    return []", "the notebook defines 'range'"),
    "thread": ("import threading, time\ndef loop():\n    while True: time.sleep(0.01)\n"
               "threading.Thread(target=loop, daemon=True).start()", "started by the submission"),
    "thread subclass": ("import threading, time\nclass T(threading.Thread):\n    def run(self):\n"
                        "        while True: time.sleep(0.01)\n"
                        "T(daemon=True).start()", "started by the submission"),
    "raw thread": ("import _thread, time\ndef loop():\n    while True: time.sleep(0.01)\n"
                   "_thread.start_new_thread(loop, ())",
                   "started by the submission"),
}


#: Vectors that break the shell's own machinery before the check can put things back: each in its own shell.
ALONE = {"sys.modules", "builtin", "import hook", "trace"}


@pytest.fixture(scope="module")
def vectors() -> dict[str, dict]:
    """The other vectors in one shell, in order (threads last, as they stay alive): the check restores between them."""
    shared = [name for name in VECTORS if name not in ALONE]
    found = dict(zip(shared, check(*[(VECTORS[name][0], TEST) for name in shared])))
    for name in ALONE:
        found[name], = check((VECTORS[name][0], TEST))
    return found


@pytest.mark.parametrize("vector", VECTORS)
def test_each_vector_voids_the_next_test_and_is_named(vectors, vector):
    result, what = vectors[vector], VECTORS[vector][1]
    assert result["student_error"] is None, result
    assert result["name"] == "TamperingDetected" and what in result["message"], result


def test_a_patch_made_during_the_test_voids_it_and_is_put_back_for_the_next():
    during, after = check(("", "import torch\ntorch.Tensor.detach = lambda self: self\n" + TEST), ("", TEST))
    assert during["name"] == "TamperingDetected" and "while this test ran" in during["message"], during
    assert "torch.Tensor.detach was replaced" in during["message"]
    assert after["name"] is None, "the original was put back, so the next test is judged on its own"


def test_a_wrong_answer_still_fails_normally():
    result, = check(("", "import numpy as np, dlkit\ndlkit.assert_close(np.zeros(2), np.ones(2))"))
    assert result["name"] == "AssertionError", result


HONEST = [
    "import torch\ntorch.manual_seed(0)\ntorch.set_default_dtype(torch.float64)\n"
    "torch.set_default_dtype(torch.float32)",
    "import torch\ntorch.set_num_threads(1)",
    "import numpy as np\nnp.random.seed(0)\nnp.set_printoptions(precision=3)",
    "import random\nrandom.seed(1)\nrandom.random()",
    "import warnings\nwarnings.filterwarnings('ignore', category=UserWarning)\nwarnings.warn('hello')",
    "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
    "plt.style.use('ggplot')\nplt.plot([1, 2])",
    "import json, collections, torch.utils.data, torch.optim, torch.distributions, numpy.fft",
    "import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.fc = torch.nn.Linear(2, 2)\n"
    "    def forward(self, x):\n        return self.fc(x)\nnet = Net()\nseen = []\n"
    "net.register_forward_hook(lambda m, i, o: seen.append(o.shape))\n"
    "opt = torch.optim.SGD(net.parameters(), lr=0.1)\nnet(torch.ones(1, 2)).sum().backward()\nopt.step()",
    "import torch\nclass MyTensor(torch.Tensor):\n    pass\nx = torch.ones(2).as_subclass(MyTensor)",
    "from tqdm.auto import tqdm\nfor _ in tqdm(range(3)):\n    pass",
    "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
    "loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=2)\nbatches = [b for b in loader]",
    "import torch\nf = torch.compile(lambda x: x * 2 + 1, backend='eager')\nf(torch.ones(3))",
    "sum = 0\nfor i in range(3):\n    sum += i",
]


def test_a_thread_whose_run_has_returned_is_not_flagged():
    """Thread.run deletes its target when it returns; until the thread deregisters it runs nothing more.

    A DataLoader's QueueFeederThread is often caught in that state right after the loop: the
    simulation below is that state, held still (the thread is parked in library code).
    """
    finished = ("import threading, time\nt = threading.Thread(target=time.sleep, args=(5,), daemon=True)\n"
                "t.start()\ndel t._target")
    [result] = check((finished, TEST))
    assert result["student_error"] is None and result["name"] is None, result


def test_honest_code_is_not_flagged():
    results = check(*[(student, TEST) for student in HONEST])
    for student, result in zip(HONEST, results):
        assert result["student_error"] is None, (student, result)
        assert result["name"] is None, (student, result)
