"""The kernel manager the grader uses: jupyter_client's, with a provisioner that launches kernels inside the
sandbox (forked from the run's warm zygote when there is one)."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from queue import Empty
from typing import Any

import psutil
import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning import LocalProvisioner
from traitlets import Integer, List, Type, Unicode

from autograder.execution import warm
from autograder.isolation import cgroups, sandbox
from autograder.isolation.limits import Limits
from autograder.isolation.watchdog import Watchdog, describe


class PromptKernelClient(AsyncKernelClient):
    """jupyter_client's client, minus two waits that cost every kernel start a tenth of a second or more:

    - the 0.2 s of IOPub silence it waits for once the kernel is ready. That wait drains the status
      messages of the kernel_info handshake; nbclient ignores every IOPub message whose parent is not
      the request it is waiting for, so they can stay queued (a quarter of the grader's whole overhead
      per warm submission, measured);
    - ZeroMQ's 100 ms between attempts to connect: the client connects as soon as the kernel is
      launched, before the kernel has bound its sockets, so its first attempt fails and the next came
      100 ms later. With 10 ms a forked kernel is ready in ~65 ms instead of ~165 ms (measured).
    """

    def _context_default(self) -> zmq.asyncio.Context:
        context = super()._context_default()  # the client's own context: only its sockets get this
        context.setsockopt(zmq.RECONNECT_IVL, 10)
        return context

    async def _async_wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while True:
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                pass
            else:
                if reply["msg_type"] == "kernel_info_reply":
                    try:  # IOPub is connected once the handshake's status message arrives on it
                        await self.iopub_channel.get_msg(timeout=0.2)
                    except Empty:
                        pass
                    else:
                        self._handle_kernel_info_reply(reply)
                        return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")

    wait_for_ready = _async_wait_for_ready  # AsyncKernelClient binds the name to its parent's function


_KERNELS = itertools.count()  # numbers this worker's kernels' cgroups


def cgroup_prefix() -> str:
    """How the memory cgroups of this worker's kernels are named (cgroups.py): the prefix, then a number."""
    return f"kernel-{os.getpid()}-"


class SandboxProvisioner(LocalProvisioner):
    """jupyter_client's local provisioner, launching the kernel through autograder.isolation.sandbox when
    its manager's `sandbox_workdir` is set, and forking it from a warm zygote when this process has one.

    Under a root grader the sandboxed kernel runs as an unprivileged user of its own (sandbox.kernel_uid),
    so the connection file is handed to that user. When this process has an active zygote
    (autograder.execution.warm), the kernel is forked from it instead of started from scratch;
    should that fail, it starts cold. A forked kernel is not our child but the zygote's grandchild:
    warm.ForkedKernel stands in for the subprocess.Popen that LocalProvisioner polls, waits for and
    signals, and warm.kill_kernels ends it with whatever it left.
    """

    sandbox_spec: Path | None = None

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        km = self.parent
        # Set on the manager when the kernel starts (the name may change after the provisioner is made).
        self.kernel_id, self.kernel_spec = km.kernel_id, km.kernel_spec
        kwargs = await super().pre_launch(**kwargs)  # writes the connection file, formats the command
        # The kernel sees an allowlist of the grader's environment, never its credentials.
        env = kwargs.get("env") or dict(os.environ)
        kwargs["env"] = sandbox.kernel_env(env)
        if km.sandbox_workdir:
            if sandbox.sandbox_mode() == "root":  # else the kernel runs as this user, in a user namespace
                os.chown(km.connection_file, sandbox.kernel_uid(), sandbox.kernel_uid())
            self.cgroup = cgroups.create(f"{cgroup_prefix()}{next(_KERNELS)}",
                                         km.memory_bytes + km.sandbox_scratch_bytes)
            self.sandbox_spec = sandbox.write_spec(Path(km.sandbox_workdir), [Path(p) for p in km.sandbox_keep],
                                                   km.sandbox_processes, km.sandbox_scratch_bytes, cgroup=self.cgroup)
            kwargs["cmd"] = sandbox.wrap(kwargs["cmd"], self.sandbox_spec)
        else:  # unsandboxed, as the TA accepted: the kernel keeps its user's home and temp folder
            kwargs["env"].update({k: env[k] for k in ("HOME", "USER", "LOGNAME", "TMPDIR") if k in env})
        return kwargs

    watchdog: Watchdog | None = None
    cgroup: Path | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Launch, then watch: memory by the watchdog where no cgroup limits it, the working folder always."""
        info = await self._launch(cmd, **kwargs)
        km = self.parent
        self.watchdog = Watchdog(self.process.pid, None if self.cgroup else km.memory_bytes,
                                 Path(km.sandbox_workdir) if km.sandbox_workdir else None,
                                 km.sandbox_scratch_bytes, self._kill_tree)
        return info

    async def _launch(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        zygote = warm.active()
        if zygote is not None:
            spec = str(self.sandbox_spec) if self.sandbox_spec else None
            try:
                env = dict(kwargs.get("env") or os.environ)
                self.process = zygote.fork_kernel(self.parent.connection_file, env, kwargs.get("cwd"), spec)
            except warm.ZygoteError as err:
                self.log.warning("starting a cold kernel: %s", err)
            else:
                self.pid = self.pgid = self.process.pid  # the kernel called setsid
                self.cwd = kwargs.get("cwd")
                return self.connection_info
        return await super().launch_kernel(cmd, **kwargs)

    def _kill_tree(self) -> None:
        """SIGKILL the launched process and everything below it (a cold kernel is the child of `unshare`)."""
        try:
            root = psutil.Process(self.process.pid)
            for process in [*root.children(recursive=True), root]:
                process.kill()
        except psutil.Error:
            pass

    def limit_exceeded(self) -> str | None:
        """Why the kernel was killed for a limit (by the watchdog, or by the OOM killer in its cgroup), if it was."""
        if self.watchdog and self.watchdog.tripped:
            return self.watchdog.tripped
        if self.cgroup and cgroups.oom_killed(self.cgroup):
            return (f"the kernel's processes reached the memory limit of {describe(self.parent.memory_bytes)} a "
                    f"submission may use (shared memory and its scratch files included)")
        return None

    async def cleanup(self, restart: bool = False) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        await super().cleanup(restart)
        if self.cgroup is not None:
            cgroups.remove(self.cgroup)


class SandboxedKernelManager(AsyncKernelManager):
    """jupyter_client's kernel manager with the sandbox's settings and a SandboxProvisioner.

    With `sandbox_workdir` set, the kernel lives in its own network namespace, so it talks to the
    grader over IPC sockets in its working folder instead of TCP.
    """

    sandbox_workdir = Unicode("", help="The sandboxed kernel's own folder; empty: no sandbox.").tag(config=True)
    sandbox_keep = List(Unicode(), help="Paths the kernel needs besides the system's programs and libraries."
                        ).tag(config=True)
    sandbox_scratch_bytes = Integer(Limits().scratch_bytes, help="Size of the kernel's /tmp, /var/tmp, /dev/shm "
                                    "and home together.").tag(config=True)
    sandbox_processes = Integer(Limits().processes, help="Processes and threads the kernel's user may run at once."
                                ).tag(config=True)
    memory_bytes = Integer(Limits().memory_bytes, help="Memory the kernel's processes may hold together (the "
                           "watchdog's backstop).").tag(config=True)
    client_factory = Type(PromptKernelClient, klass=AsyncKernelClient, config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.sandbox_workdir:
            workdir = Path(self.sandbox_workdir)
            self.transport = "ipc"
            self.ip = str(workdir / "kernel")
            self.connection_file = str(workdir / "kernel.json")
        # Set here, jupyter_client uses it instead of asking its provisioner factory, which knows only the
        # provisioners installed as entry points: the grader also runs from a checkout that is not installed.
        self.provisioner = SandboxProvisioner(parent=self)

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        """Wait for the kernel to be gone, looking every 5 ms instead of jupyter_client's 100 ms.

        The grader kills each kernel once its last cell ran (shutdown_kernel = "immediate"); a SIGKILLed
        kernel is gone within milliseconds, but the first look usually comes too early, and the next came
        0.1 s later: ~0.08 s of every submission with the core idle (measured). A look is a waitpid, or a
        /proc read for a forked kernel (warm.ForkedKernel.poll).
        """
        await super()._async_wait(pollinterval=min(pollinterval, 0.005))
