"""The kernel manager the grader uses: jupyter_client's, launching kernels inside the sandbox."""

from __future__ import annotations

import os
import time
from pathlib import Path
from queue import Empty

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import Integer, List, Type, Unicode

from autograder.execution import warm
from autograder.isolation import sandbox
from autograder.isolation.limits import Limits


class PromptKernelClient(AsyncKernelClient):
    """jupyter_client's client, minus the 0.2 s of IOPub silence it waits for once the kernel is ready.

    That wait drains the status messages of the kernel_info handshake; nbclient ignores every
    IOPub message whose parent is not the request it is waiting for, so they can stay queued.
    On a warm kernel those 0.2 s were a quarter of the grader's whole overhead per submission.
    """

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


class SandboxedKernelManager(AsyncKernelManager):
    """Start the kernel through autograder.isolation.sandbox when `sandbox_workdir` is set, forked from a warm zygote if any.

    The kernel then lives in its own network namespace, so it talks to the grader over IPC
    sockets in its working folder instead of TCP, and runs as an unprivileged user of its own
    (sandbox.kernel_uid), so the connection file is handed to that user. When this process has an active zygote
    (autograder.execution.warm), the kernel is forked from it instead of started from scratch; should
    that fail, it starts cold.
    """

    sandbox_workdir = Unicode("", help="The sandboxed kernel's own folder; empty: no sandbox.").tag(config=True)
    sandbox_hide = List(Unicode(), help="Paths the kernel must not see.").tag(config=True)
    sandbox_keep = List(Unicode(), help="Paths the kernel needs, shown even inside hidden ones.").tag(config=True)
    sandbox_processes = Integer(Limits().processes, help="Processes and threads the kernel's user may run at once."
                                ).tag(config=True)
    client_factory = Type(PromptKernelClient, klass=AsyncKernelClient, config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if self.sandbox_workdir:
            workdir = Path(self.sandbox_workdir)
            self.transport = "ipc"
            self.ip = str(workdir / "kernel")
            self.connection_file = str(workdir / "kernel.json")

    def _sandbox_spec(self) -> Path:
        return sandbox.write_spec(Path(self.sandbox_workdir), [Path(p) for p in self.sandbox_hide],
                                  [Path(p) for p in self.sandbox_keep], self.sandbox_processes)

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        cmd = super().format_kernel_cmd(extra_arguments)
        if not self.sandbox_workdir:
            return cmd
        return sandbox.wrap(cmd, self._sandbox_spec())

    def write_connection_file(self, **kwargs) -> None:
        super().write_connection_file(**kwargs)
        if self.sandbox_workdir:
            os.chown(self.connection_file, sandbox.kernel_uid(), sandbox.kernel_uid())

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        zygote = warm.active()
        if zygote is not None:
            spec = str(self._sandbox_spec()) if self.sandbox_workdir else None
            try:
                env = dict(kw.get("env") or os.environ, JPY_PARENT_PID=str(os.getpid()))  # as launch_kernel sets it
                process = zygote.fork_kernel(self.connection_file, env, kw.get("cwd"), spec)
            except warm.ZygoteError as err:
                self.log.warning("starting a cold kernel: %s", err)
            else:
                self.provisioner.process = process
                self.provisioner.pid = self.provisioner.pgid = process.pid
                self._reconcile_connection_info(self.provisioner.connection_info)
                return
        await super()._async_launch_kernel(kernel_cmd, **kw)
