"""A process that imports the heavy libraries once and forks a fresh kernel for every submission.

Started by autograder.execution.warm as `python zygote.py SANDBOX_SCRIPT SOCKET RLIMITS PLAN MODULE ...`.
It sets the resource limits RLIMITS (JSON, {"RLIMIT_DATA": bytes, ...}: the grading workers' own, so the
zygote's imports and every kernel it forks are limited as a worker's children are), listens on the
Unix socket SOCKET (before importing, so that a worker may ask at once) and imports the modules
(torch, tensorflow, ipykernel, ...) one by one, in the order given, except that what a waiting request
needs comes first. PLAN (JSON, {"ahead": n, "at": {"i": [modules the i-th kernel of the run is the
first to need]}}, or {} to import everything at once) keeps it from running too far ahead: it
imports only what the next n kernels to be asked for need, so that a long import (TensorFlow, ~3 s)
never stands between a worker and a kernel it could fork already.

It answers one request per connection: a JSON line naming the kernel's connection file, environment,
working folder, sandbox spec and the modules its notebook needs, sent with the worker's stderr as a
passed file descriptor. A request is answered as soon as the modules it names are in (between two
imports), so the first kernels of a run start while what only later notebooks need is still loading;
one that names none waits for all. Once everything is imported it prints {"ready": [...]} on stdout.
One zygote serves every grading worker of a machine; each connection is checked to come from the
zygote's own user, and one that says nothing within REQUEST_SECONDS or hangs up before its kernel is
forked gets none.

For each request it forks a keeper, and the keeper forks the kernel. The keeper is the kernel's
child subreaper: whatever the submission starts and detaches (double fork, setsid) is re-parented to
the keeper rather than escaping, and once the kernel is gone the keeper kills all of it and exits. The
worker waits for, signals and kills the kernel by pid (warm.ForkedKernel) and, after the submission,
kills the keeper's whole tree. When the request names a sandbox spec, the keeper enters new
namespaces first, so the kernel it forks is PID 1 of a PID namespace of its own, as a cold kernel
started through `unshare --pid --fork` is; then the kernel's death ends everything in that namespace.
The reply is {"pid": <kernel>, "keeper": <keeper>, "zygote": <its own pid>, "loaded": [...]}.

A kernel is always forked from this clean process, never from another kernel, so nothing a
submission does (globals, patched libraries, files) reaches the next one. The zygote itself never
runs student code, and neither the keeper nor the kernel keeps any of its descriptors (the socket
and the other requests' connections above all: a kernel that could ask for kernels could ask for one
outside the sandbox).

This file runs as a script, so it imports only the standard library and the sandbox script it is given.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import importlib.util
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
SANDBOX_SCRIPT = ""  # set from the command line: the zygote is a script and cannot import autograder.paths
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_REQUEST_BYTES = 1 << 20
REQUEST_SECONDS = 5  # a worker sends its request at once; a silent connection must not hold up the others


def preload(name: str) -> bool:
    """Import what the kernels will import; a module that fails here fails the same way in the kernel."""
    try:
        importlib.import_module(name)
        return True
    except Exception:  # noqa: BLE001 - missing or broken optional module: the kernel reports it
        return False


def _load_sandbox():
    """The sandbox script (autograder/isolation/sandbox.py), loaded by path without putting the grader's
    folders on the kernel's sys.path."""
    spec = importlib.util.spec_from_file_location("_kit_sandbox", SANDBOX_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def die_with_parent() -> None:
    """Be killed the moment the parent (the kernel's keeper) dies (Linux's parent-death signal).

    ipykernel watches its parent only where it can see it, and a sandboxed kernel, PID 1 of its own PID
    namespace, sees none: a grading run killed as a whole (SIGTERM to its process group: `timeout`, a CI
    job cancelled) took the keepers with it and left their kernels running, holding memory, forever.
    """
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, "PR_SET_PDEATHSIG")


def become_subreaper() -> None:
    """Adopt every orphaned descendant (Linux): nothing below this process can re-parent itself away."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1, "PR_SET_CHILD_SUBREAPER")


def _prctl(option: int, value: int, name: str) -> None:
    if ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({name}) failed")


def children(pid: int) -> list[int]:
    """The pids of `pid`'s children, from /proc (CONFIG_PROC_CHILDREN, else a scan of every process)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        pass
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
    return found


def kill_children() -> None:
    """SIGKILL every child of this process (the caller reaps them). A subreaper gets its descendants as
    children when their parents die, so calling this until none are left ends the whole tree."""
    for pid in children(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def become_kernel(request: dict, log_fd: int, sandbox) -> None:
    """In the forked grandchild: detach, enter the sandbox (when `sandbox` is the loaded sandbox module
    and the keeper entered its namespaces), run ipykernel; never returns."""
    code = 1
    try:
        os.setsid()  # its own process group, so an interrupt or kill reaches the kernel's children too
        signal.signal(signal.SIGINT, signal.default_int_handler)  # as a cold kernel starts (its keeper ignores it)
        devnull = os.open(os.devnull, os.O_RDWR)
        os.dup2(devnull, 0)
        os.dup2(log_fd, 1)  # the kernel's stray output goes to its worker's log
        os.dup2(log_fd, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        gc.enable()  # the kernel collects its own cycles; the zygote's objects are frozen (start_kernel)
        sys.argv[:] = sys.argv[:1]  # the zygote's arguments name its socket
        env = dict(request["env"])
        if sandbox is not None:
            sandbox.enter(request["sandbox_spec"])
            env = {**sandbox.kernel_env(env), **sandbox.private_env()}
        elif request.get("cwd"):
            os.chdir(request["cwd"])
        die_with_parent()  # after the sandbox's change of user, which clears it
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # cached by the zygote's imports; ipykernel keeps each cell's source under it
        from ipykernel.kernelapp import IPKernelApp

        # The app read JPY_PARENT_PID when the zygote imported it; the kernel's parent is its keeper.
        IPKernelApp.launch_instance(argv=["-f", request["connection_file"],
                                          f"--IPKernelApp.parent_handle={os.getppid()}"])
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 0
    except BaseException:  # noqa: BLE001 - report, then leave without running the zygote's loop
        traceback.print_exc()
    finally:
        os._exit(code)


def keep(kernel: int) -> None:
    """In the keeper: reap what is re-parented here while the kernel runs; once it is gone, kill what is
    left (each reaped process re-parents its own children here first) and leave with the kernel's exit
    status. Never returns."""
    status, gone = 1, False
    while True:
        try:
            pid, wait_status = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == kernel:
            gone = True
            code = os.waitstatus_to_exitcode(wait_status)
            status = 128 - code if code < 0 else code
        if gone:
            kill_children()
    os._exit(status)


def start_kernel(request: dict, log_fd: int, keep_fds: set[int]) -> tuple[int, int]:
    """Fork the keeper, which forks the kernel; return (kernel pid, keeper pid).

    Everything the zygote holds is first moved to the collector's permanent generation (gc.freeze), which
    no collection in the kernel traverses. Otherwise a kernel's full collection walks every object of
    torch and TensorFlow, copying each page it touches (copy-on-write): 200 ms a collection, and Python
    code that allocates ran 40% slower in the kernel, measured.
    """
    gc.freeze()
    read_end, write_end = os.pipe()
    keeper = os.fork()
    if keeper == 0:
        try:
            os.close(read_end)
            for fd in keep_fds:  # the zygote's socket and pipes: nothing below the zygote may hold them
                os.close(fd)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is for the grader, which kills us
            become_subreaper()
            sandbox = None
            if request.get("sandbox_spec"):
                sandbox = _load_sandbox()
                with open(request["sandbox_spec"]) as spec:
                    sandbox.unshare_namespaces(json.load(spec)["mode"])
            kernel = os.fork()
        except BaseException:  # noqa: BLE001 - no pid written: the worker starts a cold kernel
            traceback.print_exc()
            os._exit(1)
        if kernel == 0:
            os.close(write_end)
            become_kernel(request, log_fd, sandbox)
        os.write(write_end, str(kernel).encode())
        os.close(write_end)
        os.close(log_fd)
        keep(kernel)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as answer:
        kernel = int(answer.read() or 0)
    if kernel <= 0:
        os.waitpid(keeper, 0)
        raise RuntimeError("the keeper could not fork the kernel (see the zygote's log)")
    return kernel, keeper


def receive(conn: socket.socket) -> tuple[dict, int]:
    """One request: a JSON line, the first part of which carries the worker's stderr descriptor."""
    conn.settimeout(REQUEST_SECONDS)
    data, fds, _, _ = socket.recv_fds(conn, _REQUEST_BYTES, 1)
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise ValueError("a request must pass the worker's stderr")
    try:
        while not data.endswith(b"\n"):
            more = conn.recv(_REQUEST_BYTES)
            if not more:
                raise ValueError("the request ended early")
            data += more
        request = json.loads(data)
        modules = request.get("modules") if isinstance(request, dict) else None
        if not isinstance(request, dict) or not (
                modules is None or (isinstance(modules, list) and all(isinstance(m, str) for m in modules))):
            raise ValueError("a request is a JSON object whose modules are a list of names")
    except BaseException:
        os.close(fds[0])  # else every later keeper would inherit it
        raise
    return request, fds[0]


def from_our_user(conn: socket.socket) -> bool:
    """Whether the peer runs as this process's user (a sandboxed kernel never does)."""
    _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return uid == os.geteuid()


def hung_up(conn: socket.socket) -> bool:
    """Whether the worker closed the connection (it gave up waiting and started a cold kernel)."""
    readable, _, _ = select.select([conn], [], [], 0)
    return bool(readable) and conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""


def reap(keepers: set[int]) -> None:
    """Collect keepers that have exited; kill anything else re-parented to the zygote (a keeper was killed
    before what it kept)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        keepers.discard(pid)
    for pid in children(os.getpid()):
        if pid not in keepers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Zygote:
    """The serving state: what is imported so far, the requests waiting for more, the keepers forked."""

    def __init__(self, listener: socket.socket, modules: list[str], starter: int, plan: dict | None = None):
        self.listener, self.starter = listener, starter
        self.to_import = list(dict.fromkeys(modules))
        self.loaded: list[str] = []
        self.waiting: list[tuple[socket.socket, dict, int]] = []  # (connection, request, worker's stderr)
        self.keepers: set[int] = set()
        self.served = 0  # kernels forked
        plan = plan or {}
        self.ahead = int(plan.get("ahead", 0))
        self.first_needed = {int(i): set(names) for i, names in plan.get("at", {}).items()}

    def inherited(self) -> set[int]:
        """Descriptors no keeper or kernel may keep: the socket, the starter's pipes, other requests'."""
        fds = {self.listener.fileno(), 0, 1} | ({self.starter} if self.starter >= 0 else set())
        return fds | {fd for conn, _, log_fd in self.waiting for fd in (conn.fileno(), log_fd)}

    def has_what(self, request: dict) -> bool:
        """Whether every module the request's kernel needs, of those this zygote imports, is in (or failed);
        a request that names none waits for all."""
        wanted = request.get("modules")
        return not self.to_import if wanted is None else set(self.to_import).isdisjoint(wanted)

    def take(self) -> None:
        """Accept the connections that came, without waiting: answer each whose modules are in, keep the rest."""
        while select.select([self.listener], [], [], 0)[0]:
            self.accept()

    def accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            if not from_our_user(conn):
                raise PermissionError("a request from another user")
            request, log_fd = receive(conn)
        except Exception as err:  # noqa: BLE001 - the worker falls back to a cold kernel
            with conn:
                try:
                    conn.sendall((json.dumps({"error": f"{type(err).__name__}: {err}"}) + "\n").encode())
                except OSError:
                    pass
            return
        self.waiting.append((conn, request, log_fd))
        self.answer_waiting()

    def answer_waiting(self) -> None:
        """Answer, in the order they came, the waiting requests whose modules are in."""
        for item in [w for w in self.waiting if self.has_what(w[1])]:
            self.waiting.remove(item)
            self.answer(*item)

    def answer(self, conn: socket.socket, request: dict, log_fd: int) -> None:
        """Fork the kernel `request` asks for and reply with its pids; nothing for a worker that hung up."""
        keeper = None
        with conn:
            try:
                try:
                    if hung_up(conn):
                        return
                    kernel, keeper = start_kernel(request, log_fd, self.inherited() | {conn.fileno()})
                finally:
                    os.close(log_fd)
                self.keepers.add(keeper)
                self.served += 1
                reply = {"pid": kernel, "keeper": keeper, "zygote": os.getpid(), "loaded": self.loaded}
            except Exception as err:  # noqa: BLE001 - the worker falls back to a cold kernel
                reply, keeper = {"error": f"{type(err).__name__}: {err}"}, None
            try:
                conn.sendall((json.dumps(reply) + "\n").encode())
            except OSError:  # the worker is gone or gave up: nobody will ever stop this kernel but us
                if keeper is not None:
                    try:
                        os.kill(keeper, signal.SIGKILL)  # what it kept is re-parented here, and reap kills it
                    except ProcessLookupError:
                        pass

    def next_import(self) -> str | None:
        """The module to import now: what a waiting request needs, else the next one the plan says is due;
        None when nothing is (all imported, or the plan's next kernels are still far off)."""
        if any(request.get("modules") is None for _, request, _ in self.waiting):
            return self.to_import[0] if self.to_import else None  # it waits for everything
        wanted = set().union(*(request["modules"] for _, request, _ in self.waiting))
        return next((m for m in self.to_import if m in wanted), None) or next(
            (m for m in self.to_import if self.due(m)), None)

    def due(self, name: str) -> bool:
        """Whether the plan wants `name` imported by now: a module the next `ahead` kernels to ask (counted from
        those forked so far) need, or one the plan does not place. Without a plan, everything is due at once."""
        if self.ahead <= 0:
            return True
        soon = self.served + self.ahead
        return all(name not in names for i, names in self.first_needed.items() if i >= soon)

    def run(self) -> None:
        """Import and answer until the process that started the zygote is gone: one request per connection,
        answered as soon as what it needs is in; between two imports, fork the kernels whose modules are all
        in. Once everything is imported, say so on the starter's pipe."""
        while True:
            self.drop_departed()
            name = self.next_import()
            if name is not None:
                if preload(name):
                    self.loaded.append(name)
                self.to_import.remove(name)
                reap(self.keepers)
                self.take()
                self.answer_waiting()
                continue
            if not self.to_import and self.starter >= 0:
                gc.freeze()
                gc.enable()  # for what serving leaves behind; the imported modules are frozen
                os.write(self.starter, (json.dumps({"ready": self.loaded}) + "\n").encode())
                os.close(self.starter)
                self.starter = -1
            ready, _, _ = select.select([self.listener, sys.stdin, *(conn for conn, _, _ in self.waiting)], [], [], 0.5)
            reap(self.keepers)
            if sys.stdin in ready and not sys.stdin.buffer.read1(1):
                return  # the process that started us is gone
            if self.listener in ready:
                self.accept()

    def drop_departed(self) -> None:
        """Forget the waiting requests whose worker hung up (it gave up and started a cold kernel), or sent more
        than its one request: a waiting connection has nothing more to say."""
        said = set(select.select([conn for conn, _, _ in self.waiting], [], [], 0)[0]) if self.waiting else set()
        for item in [w for w in self.waiting if w[0] in said]:
            self.waiting.remove(item)
            conn, _, log_fd = item
            conn.close()
            os.close(log_fd)


def serve(listener: socket.socket, modules: list[str], plan: dict) -> None:
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]  # kernels must not import the grader
    gc.disable()  # while importing: torch and its compiler stack load in 2.0 s instead of 2.5 s (measured)
    starter = os.dup(1)
    os.dup2(2, 1)  # what imports print goes to the log: a pipe nobody reads would fill and stop the zygote
    become_subreaper()
    Zygote(listener, modules, starter, plan).run()


def listen(path: str) -> socket.socket:
    """The zygote's socket, reachable by its own user only (the folder holding it is the starter's, 0700).

    Bound under another name and renamed once listening: a worker that finds the address can connect.
    """
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    partial = f"{path}.partial"
    listener.bind(partial)
    os.chmod(partial, 0o600)
    listener.listen(64)
    os.rename(partial, path)
    return listener


def limit(rlimits: dict[str, int]) -> None:
    """Set each named resource limit (soft and hard) on this process, as the grading workers have them (a
    limit the system refuses is refused to the workers too, and each worker's log says so)."""
    for name, value in rlimits.items():
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            pass


if __name__ == "__main__":
    SANDBOX_SCRIPT = sys.argv[1]
    limit(json.loads(sys.argv[3]))
    serve(listen(sys.argv[2]), sys.argv[5:], json.loads(sys.argv[4]))
