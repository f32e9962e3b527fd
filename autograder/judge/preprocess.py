"""Where the judge meets nbgrader: which test cells it decides, and how GuardedExecute asks the kernel.

An instructor notebook opts in with `"dlkit": {"judge": true}` in its metadata. Then `JudgeTests`
(an autograde preprocessor, before execution) takes every test cell out of the kernel's hands:
the test's code is read from the instructor's source notebook (never from the submission), with
the seed of that student and test, and GuardedExecute runs it in the judge (session.py) instead of
sending it to the kernel. The cell keeps its place, its grade_id and its points, so nbgrader
scores it, formgrader shows it and a TA's workflow does not change; its outputs are what the judge
wrote: what the test printed, and an error naming the failure when it failed.
"""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path
from typing import Callable

import nbformat
import zmq
from jupyter_core.utils import run_sync
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import NbGraderPreprocessor
from nbgrader.utils import is_grade, is_solution

from autograder.course import grade_id_of, notebook_imports
from autograder.judge.remote import CallTimedOut, IgnoredInterrupt, KernelLost, RefusedReply
from dlkit.agent import CALLBACK_PROMPT
from dlkit.seeding import seed_for

#: The resources key under which JudgeTests leaves {"modules": [...], "cells": {grade_id: {"seed", "source"}}}.
JUDGED = "dlkit_judged"
#: How the judge's request reaches the kernel's agent: a user expression, evaluated after an empty cell.
AGENT_CALL = "__import__('dlkit.agent').agent.handle({request!r})"


def source_notebook(config, resources: dict) -> nbformat.NotebookNode:
    """The instructor's source notebook of the notebook being graded (trusted: never the student's copy)."""
    meta = resources["nbgrader"]
    coursedir = CourseDirectory(config=config)
    folder = Path(coursedir.format_path(coursedir.source_directory, ".", meta["assignment"]))
    path = folder / (meta["notebook"] + ".ipynb")
    return _read(str(path), path.stat().st_mtime_ns)


@lru_cache(maxsize=16)
def _read(path: str, mtime: int) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def judged_cells(resources: dict) -> dict[str, dict]:
    """{grade_id: {"seed", "source"}} of the test cells the judge decides in this notebook (empty: none)."""
    return resources.get(JUDGED, {}).get("cells", {})


class JudgeTests(NbGraderPreprocessor):
    """Hand the test cells of a judged notebook to the judge (see the module's docstring)."""

    def preprocess(self, nb, resources):
        source = source_notebook(self.config, resources)
        if not (source.metadata.get("dlkit") or {}).get("judge"):
            return nb, resources
        student, assignment = resources["nbgrader"]["student"], resources["nbgrader"]["assignment"]
        tests = {grade_id_of(cell): cell.source for cell in source.cells
                 if cell.cell_type == "code" and is_grade(cell) and not is_solution(cell)}
        resources[JUDGED] = {
            "modules": sorted(set(notebook_imports(source))),
            "cells": {grade_id: {"seed": seed_for(student, assignment, grade_id), "source": text}
                      for grade_id, text in tests.items()},
        }
        return nb, resources


class KernelTransport:
    """One request to the kernel's agent and its reply's text, for GuardedExecute's kernel (`client`).

    It speaks to the kernel's sockets directly and synchronously (plain pyzmq views of the kernel client's
    sockets, signed and checked by its session), with one poll over the three channels: a request then costs
    2.8 ms against the kernel instead of 3.6-4.0 ms through the asynchronous client's channels (an event loop
    run per request, a round of polls every few milliseconds; measured on an idle kernel), and a class's
    hidden tests send thousands. No asynchronous read is pending on these sockets between nbclient's cells.
    """

    def __init__(self, client) -> None:
        self.client = client

    def __call__(self, request: str, timeout: float, answer: Callable[[str], str]) -> str:
        kc = self.client.kc
        sockets = _Sockets(kc)
        message = kc.session.msg("execute_request", {
            "code": "", "silent": True, "store_history": False, "allow_stdin": True, "stop_on_error": False,
            "user_expressions": {"r": AGENT_CALL.format(request=request)}})
        kc.session.send(sockets.shell, message)
        reply = self._wait(sockets, message["header"]["msg_id"], timeout, answer)
        content = reply.get("content", {}) if isinstance(reply, dict) else {}
        answer = (content.get("user_expressions") or {}).get("r") if content.get("status") == "ok" else None
        if not isinstance(answer, dict) or answer.get("status") != "ok":
            why = answer.get("ename", "") if isinstance(answer, dict) else content.get("ename", "no reply")
            raise RefusedReply(f"the kernel did not answer the grader's request ({str(why)[:200]})")
        text = (answer.get("data") or {}).get("text/plain")
        if not isinstance(text, str):
            raise RefusedReply("the kernel's answer to the grader was not text")
        return text

    def _wait(self, sockets: "_Sockets", msg_id: str, timeout: float, answer: Callable[[str], str]) -> dict:
        """The reply to msg_id within `timeout`; the kernel's output meanwhile is dropped (the request's is not a
        cell's). Past the time: interrupt, then CallTimedOut, or KernelLost if the kernel does not come back."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            ready = dict(sockets.poller.poll(1000 * min(left, 0.2)))
            if not ready:  # quiet for a while: is the kernel still there?
                if not run_sync(self.client.kc.is_alive)():
                    raise KernelLost(self._why_dead())
                continue
            if sockets.iopub in ready:
                sockets.drop_output()
            if sockets.stdin in ready:
                self._answer_callbacks(sockets, msg_id, answer)
            if sockets.shell in ready:
                reply = sockets.receive(sockets.shell)
                if reply is not None and reply["parent_header"].get("msg_id") == msg_id:
                    return reply
        run_sync(self.client.km.interrupt_kernel)()
        if not sockets.shell.poll(1000 * self.client.stuck_grace):
            raise IgnoredInterrupt(f"ran past the {timeout:.0f} s limit and its kernel ignored the interrupt")
        sockets.receive(sockets.shell)
        raise CallTimedOut(f"a call into the submission's code was still running after {timeout:.0f} s")

    def _answer_callbacks(self, sockets: "_Sockets", msg_id: str, answer: Callable[[str], str]) -> None:
        """Answer the kernel's calls of the judge's functions (input requests of this request only)."""
        session = self.client.kc.session
        while (request := sockets.receive(sockets.stdin, wait=False)) is not None:
            prompt = (request.get("content") or {}).get("prompt")
            if request.get("msg_type") != "input_request" or request["parent_header"].get("msg_id") != msg_id:
                continue
            ok = isinstance(prompt, str) and prompt.startswith(CALLBACK_PROMPT)
            text = answer(prompt[len(CALLBACK_PROMPT):]) if ok else "\x04"  # EOF for any other input()
            session.send(sockets.stdin, session.msg("input_reply", {"value": text}))

    def _why_dead(self) -> str:
        limit = self.client._limit_exceeded()
        return f"the grader killed the kernel: {limit}" if limit else "the kernel died during the hidden tests"



class _Sockets:
    """Synchronous views of a kernel client's shell, iopub and stdin sockets, and one poller over them."""

    def __init__(self, kc) -> None:
        self.session = kc.session
        self.shell, self.iopub, self.stdin = (zmq.Socket.shadow(channel.socket.underlying) for channel in (
            kc.shell_channel, kc.iopub_channel, kc.stdin_channel))
        self.poller = zmq.Poller()
        for socket in (self.shell, self.iopub, self.stdin):
            self.poller.register(socket, zmq.POLLIN)

    def receive(self, socket: zmq.Socket, wait: bool = True) -> dict | None:
        """One message from `socket`, checked against the session's key; None if there is none (or it is not one)."""
        try:
            parts = socket.recv_multipart(0 if wait else zmq.NOBLOCK)
        except zmq.Again:
            return None
        try:
            _, parts = self.session.feed_identities(parts)
            return self.session.deserialize(parts)
        except Exception:  # a message the kernel's session did not sign, or not one at all
            return {"parent_header": {}, "msg_type": "", "content": {}}

    def drop_output(self) -> None:
        """Discard what the kernel published meanwhile, unread (no parsing of bytes the student controls)."""
        for _ in range(10_000):
            try:
                self.iopub.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
