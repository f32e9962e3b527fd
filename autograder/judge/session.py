"""Run one notebook's test cells in the judge: the test's code here, the student's functions in their kernel.

A test cell's source (visible asserts and hidden tests alike) is executed in this process, in a
namespace of the notebook's own: every name the cell reads and does not define is looked up in
the student's kernel first (agent.py): a module becomes the judge's own import of that module, plain
data is decoded here, and a function or object of the student's becomes a `Remote` that runs there
when called. So `assert matmul_flops(2, 3, 4) == 48` compares, in the grader's process, the number
the kernel sent back; the expected values, the reference, the comparison and the verdict never
exist where student code runs. Checks that need the student's process (counting the torch
operations a function runs, watching for float64) run there through `dlkit.dispatched_ops` and
`dlkit.assert_no_float64`, whose answers decide only their own check.

`dlkit` inside a test is `JudgeDlkit`: the real helpers, except `check_on_devices`, which visits the
devices here, tells the kernel which device each call runs under, and records each device's result
for the grader (results.py) directly, with no marker a kernel could send.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import gc
import io
import sys
import time
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import dlkit
from autograder.grading.messages import message
from autograder.judge.remote import CallTimedOut, IgnoredInterrupt, KernelLink, KernelLost, RefusedReply, Remote
from dlkit import ondevice
from dlkit.seeding import SEED_MARKER, seed_everything

#: Most characters of what a test prints that the cell keeps.
MAX_PRINTED = 20_000


@dataclass
class Verdict:
    """One test cell's outcome as the judge decided it."""

    passed: bool
    ename: str = ""
    evalue: str = ""
    printed: str = ""
    devices: dict[str, dict] = field(default_factory=dict)
    kernel_lost: str | None = None
    seconds: float = 0.0


def free_names(source: str) -> list[str]:
    """Names a cell reads without binding them anywhere in it (nor built-ins): what the notebook must provide."""
    tree = ast.parse(source)
    read, bound = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load):
                read.append((node.lineno, node.col_offset, node.id))
            else:
                bound.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    in_order = dict.fromkeys(name for _, _, name in sorted(read))
    return [name for name in in_order if name not in bound and not hasattr(builtins, name)]


#: Defined in the kernel to ask which device kinds TensorFlow has there (JudgeDlkit._present).
_TF_KINDS = ("def _dlkit_tf_kinds():\n    from dlkit.devices import tf_kinds_present\n"
             "    return list(tf_kinds_present())\n")


class JudgeDlkit(types.ModuleType):
    """What `import dlkit` gives a test in the judge: dlkit itself, with the helpers that meet the kernel."""

    def __init__(self, link: KernelLink, devices: dict[str, dict], source: str = "",
                 tf_kinds: list[list[str]] | None = None) -> None:
        super().__init__("dlkit", dlkit.__doc__)
        self._link, self._devices, self._source = link, devices, source
        self._tf_kinds = tf_kinds if tf_kinds is not None else []  # the session's answer, once asked

    def __getattr__(self, name: str) -> Any:
        return getattr(dlkit, name)

    def dispatched_ops(self, fn, *args):
        """As dlkit.dispatched_ops; for a student's function the count is taken in their kernel."""
        if isinstance(fn, Remote):
            return self._link.call(fn, args, {}, watch="ops")
        return dlkit.dispatched_ops(fn, *args)

    def in_kernel(self, fn):
        """As dlkit.in_kernel: the function, defined in the student's kernel from the test's source, runs there."""
        node = _definition(self._source, fn)
        node.decorator_list = []
        return self._link.define(ast.unparse(node), node.name)

    def called_functions(self, fn, *args):
        """As dlkit.called_functions; for a student's function the calls are recorded in their kernel."""
        if isinstance(fn, Remote):
            return self._link.call(fn, args, {}, watch="functions")
        return dlkit.called_functions(fn, *args)

    def assert_no_float64(self, fn, *args, name: str = "the function"):
        """As dlkit.assert_no_float64; for a student's function the operations are watched in their kernel."""
        if isinstance(fn, Remote):
            return self._link.call(fn, args, {}, watch="float64", name=name)
        return dlkit.assert_no_float64(fn, *args, name=name)

    def _present(self, framework: str) -> list[str]:
        """The device kinds `framework` has where the student's code runs. TensorFlow's are asked of the kernel
        (once per notebook), which imports it anyway; the CPU is always there, whatever the kernel says."""
        if framework == "torch":
            return ondevice._present("torch")
        if not self._tf_kinds:
            reported = self._link.define(_TF_KINDS, "_dlkit_tf_kinds")()
            kinds = [k for k in ("cuda", "xla") if isinstance(reported, list) and k in reported]
            self._tf_kinds.append(["cpu", *kinds])
        return self._tf_kinds[0]

    def check_on_devices(self, check: Callable[[str], None], kinds: list[str] | None = None,
                         framework: str = "torch") -> dict[str, str]:
        """As dlkit.check_on_devices, recording each device's result for the grader instead of sending markers."""
        if framework not in ondevice.FRAMEWORKS:
            raise ValueError(f"framework must be one of {ondevice.FRAMEWORKS}, not {framework!r}")
        statuses: dict[str, str] = {}
        errors: dict[str, BaseException] = {}
        for kind, present in ondevice._kinds_to_visit(kinds, framework, self._present(framework)):
            if not present:
                statuses[kind] = "skipped"
                self._devices[kind] = {"status": "skipped", "message": ondevice._absence(kind, framework)}
                continue
            # TensorFlow's placement matters only in the kernel, where its code runs; the judge never imports it
            # for placement (seconds per worker, and on a GPU machine its eager context would take GPU memory).
            judge_side = ondevice._placement(kind, framework) if framework == "torch" else contextlib.nullcontext()
            try:
                with judge_side, self._link.placed(kind, framework):
                    check(kind)
            except ondevice.SkipDevice as why:
                statuses[kind] = "skipped"
                self._devices[kind] = {"status": "skipped", "message": message(f"not run on {kind}: {why}")}
            except Exception as err:
                errors[kind] = err
                statuses[kind] = "failed"
                self._devices[kind] = {"status": "failed", "message": message(ondevice._describe(kind, err))}
            else:
                statuses[kind] = "passed"
                self._devices[kind] = {"status": "passed", "message": ""}
        if "cpu" in errors:
            raise errors["cpu"]
        if errors:
            raise AssertionError("; ".join(ondevice._describe(kind, err) for kind, err in errors.items())
                                 + " (passed on cpu)")
        return statuses


class JudgeSession:
    """One notebook's test cells: the namespace they share in the judge, and the modules they may take from it.

    `modules` are the modules the instructor's notebook imports, by full name: a name the kernel reports as a
    module is imported here only when it is one of them or already imported in this process, so a student
    cannot make the grader import anything new (a package's `__main__`, a submodule with side effects).
    """

    def __init__(self, link: KernelLink, modules: set[str]) -> None:
        self.link, self.modules = link, set(modules) | {"dlkit"}
        self.shared: dict[str, Any] = {}  # what earlier test cells defined
        self._tf_kinds: list[list[str]] = []  # TensorFlow's device kinds in the kernel, once asked
        preload({name.split(".")[0] for name in self.modules})

    def _import(self, name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name.split(".")[0] == "dlkit":
            if name == "dlkit" or not fromlist:
                return self._view
            return builtins.__import__(name, globals, locals, fromlist, level)
        return builtins.__import__(name, globals, locals, fromlist, level)

    def _namespace(self, source: str, seed: int) -> dict[str, Any]:
        """The test's namespace; asking the kernel for the names it reads also seeds the kernel (one request)."""
        names = [name for name in free_names(source) if name not in self.shared]
        space: dict[str, Any] = {"__builtins__": {**vars(builtins), "__import__": self._import},
                                 "__name__": "__judge__"}
        space.update(self.shared)
        for name, entry in self.link.begin(seed, names).items():
            if "value" in entry:
                space[name] = entry["value"]
            elif entry.get("module") == "dlkit":
                space[name] = self._view
            elif entry.get("module") in self.modules or entry.get("module") in sys.modules:
                space[name] = _module(entry["module"])
        return space

    def run(self, grade_id: str, source: str, seed: int) -> Verdict:
        """Run one test cell's code (visible and hidden) with the student's functions in their kernel."""
        started = time.monotonic()
        devices: dict[str, dict] = {}
        self._view = JudgeDlkit(self.link, devices, source, self._tf_kinds)
        printed = io.StringIO()
        verdict = Verdict(passed=True)
        try:
            self.link.callbacks.clear()  # the judge's functions an earlier test passed: not callable now
            with contextlib.redirect_stdout(printed), _torch_state():
                print(f"{SEED_MARKER} {seed}")
                code = compile(source, f"<test {grade_id}>", "exec")
                space = self._namespace(source, seed)
                seed_everything(seed)
                before = set(space)
                exec(code, space)
                self.shared.update({k: v for k, v in space.items() if k not in before or k in self.shared})
        except IgnoredInterrupt as err:  # a timeout, as in-kernel tests report it; the kernel is gone with it
            verdict = Verdict(False, "CellTimeoutError", str(err), kernel_lost=str(err))
        except KernelLost as err:
            verdict = Verdict(False, "DeadKernelError", str(err), kernel_lost=str(err))
        except CallTimedOut as err:
            verdict = Verdict(False, "CellTimeoutError", f"the hidden tests ran past the time limit: {err}")
        except RefusedReply as err:
            verdict = Verdict(False, "RefusedReply", str(err))
        except SyntaxError as err:  # the test's own source: the instructor's, so say so plainly
            verdict = Verdict(False, "SyntaxError", f"the test cell does not compile: {err}")
        except Exception as err:
            verdict = Verdict(False, type(err).__name__, str(err))
        verdict.printed = printed.getvalue()[:MAX_PRINTED]
        verdict.devices = devices
        verdict.seconds = time.monotonic() - started
        return verdict


def _definition(source: str, fn) -> ast.FunctionDef:
    """The `def` of `fn` in a test cell's source: where its code object starts (its first decorator's line)."""
    line = fn.__code__.co_firstlineno
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == fn.__name__ and line in (
                node.lineno, *(d.lineno for d in node.decorator_list)):
            return node
    raise ValueError(f"dlkit.in_kernel: no definition of {fn.__name__} in the test's source")


def preload(modules: set[str]) -> None:
    """Import torch (and torch._dynamo, which the simulated accelerator's placement reaches) as the zygote does:
    without the cyclic collector while importing, and frozen after it, so collections never walk torch's
    objects again (2.3 s to import it with the collector on, in a worker beside a running kernel).

    The grader calls this in its main process before it forks local workers, while the zygote imports on
    another core, so no worker pays it (1.2 s for torch and 0.9 s for torch._dynamo per worker, measured);
    a worker that was not forked from it (Dask) pays it at its first judged notebook."""
    if "torch" not in modules or "torch._dynamo" in sys.modules:
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        import torch  # noqa: F401
        import torch._dynamo  # noqa: F401
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _module(name: str) -> types.ModuleType:
    __import__(name)
    return sys.modules[name]


@contextlib.contextmanager
def _torch_state():
    """Put back what a test may change in torch's global state, so the next submission's tests start alike."""
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    dtype, grad = torch.get_default_dtype(), torch.is_grad_enabled()
    try:
        yield
    finally:
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(grad)
