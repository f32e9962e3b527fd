"""A process that imports the heavy libraries once and forks a fresh kernel for every submission.

Started by autograder.execution.warm as `python zygote.py SANDBOX_SCRIPT MODULE ...`. It imports the modules (torch,
tensorflow, ipykernel, ...), prints {"ready": [...]} and then reads one JSON request per line on
stdin. For each it forks twice: the grandchild becomes the student's kernel, and the middle
process exits at once, so the kernel is adopted by the grading worker (a child subreaper) and
the worker can wait for it, signal it and kill it like any kernel it started itself. The reply
is {"pid": <kernel pid>}. When the request names a sandbox spec, the middle process enters new
namespaces first, so the kernel it forks is PID 1 of a PID namespace of its own, as a cold kernel
started through `unshare --pid --fork` is.

A kernel is always forked from this clean process, never from another kernel, so nothing a
submission does (globals, patched libraries, files) reaches the next one. The zygote itself never
runs student code. The forked kernel drops the zygote's pipes, enters the sandbox exactly as
sandbox.py's command-line entry does (when the request names a spec), and starts ipykernel.

This file runs as a script, so it imports only the standard library and the sandbox script it is given.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SANDBOX_SCRIPT = ""  # set from the command line: the zygote is a script and cannot import autograder.paths


def preload(modules: list[str]) -> list[str]:
    """Import what the kernels will import; a module that fails here fails the same way in the kernel."""
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception:  # noqa: BLE001 - missing or broken optional module: the kernel reports it
            pass
    return loaded


def _load_sandbox():
    """The sandbox script (autograder/isolation/sandbox.py), loaded by path without putting the grader's
    folders on the kernel's sys.path."""
    spec = importlib.util.spec_from_file_location("_kit_sandbox", SANDBOX_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def become_kernel(request: dict, sandbox) -> None:
    """In the forked grandchild: detach from the zygote, enter the sandbox (when `sandbox` is the loaded
    sandbox module and the middle process entered its namespaces), run ipykernel; never returns."""
    code = 1
    try:
        os.setsid()  # its own process group, so an interrupt or kill reaches the kernel's children too
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)  # the zygote's request pipe
        os.dup2(2, 1)        # the zygote's reply pipe: the kernel's stray output goes to the worker's log
        env = dict(request["env"])
        if sandbox is not None:
            env.update(sandbox.private_env(sandbox.enter(request["sandbox_spec"])))
        elif request.get("cwd"):
            os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # cached by the zygote's imports; ipykernel keeps each cell's source under it
        from ipykernel.kernelapp import IPKernelApp

        # The app read JPY_PARENT_PID when the zygote imported it; the kernel's parent is the worker.
        parent = env.get("JPY_PARENT_PID", "0")
        IPKernelApp.launch_instance(argv=["-f", request["connection_file"], f"--IPKernelApp.parent_handle={parent}"])
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0
    except BaseException:  # noqa: BLE001 - report, then leave without running the zygote's loop
        traceback.print_exc()
    finally:
        os._exit(code)


def fork_kernel(request: dict) -> int:
    """Fork the kernel as a grandchild that the zygote does not own; return its pid."""
    read_end, write_end = os.pipe()
    middle = os.fork()
    if middle == 0:
        os.close(read_end)
        sandbox = None
        try:
            if request.get("sandbox_spec"):
                sandbox = _load_sandbox()
                sandbox.unshare_namespaces()
            kernel = os.fork()
        except BaseException:  # noqa: BLE001 - no pid written: the worker starts a cold kernel
            traceback.print_exc()
            os._exit(1)
        if kernel == 0:
            os.close(write_end)
            become_kernel(request, sandbox)
        os.write(write_end, str(kernel).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        pid = int(answer.read() or 0)
    os.waitpid(middle, 0)
    return pid


def serve(modules: list[str]) -> None:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # kernels must not import the grader
    print(json.dumps({"ready": preload(modules)}), flush=True)
    for line in sys.stdin:
        try:
            reply = {"pid": fork_kernel(json.loads(line))}
        except Exception as err:  # noqa: BLE001 - the worker falls back to a cold kernel
            reply = {"error": f"{type(err).__name__}: {err}"}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    SANDBOX_SCRIPT = sys.argv[1]
    serve(sys.argv[2:])
