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
from queue import Empty
from typing import Callable

import nbformat
from jupyter_core.utils import ensure_async, run_sync
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
    """One request to the kernel's agent and its reply's text, for GuardedExecute's kernel (`client`)."""

    def __init__(self, client) -> None:
        self.client = client

    def __call__(self, request: str, timeout: float, answer: Callable[[str], str]) -> str:
        client = self.client
        msg_id = client.kc.execute("", silent=True, store_history=False, allow_stdin=True,
                                   user_expressions={"r": AGENT_CALL.format(request=request)})
        reply = run_sync(self._wait)(msg_id, timeout, answer)
        content = reply.get("content", {}) if isinstance(reply, dict) else {}
        answer = (content.get("user_expressions") or {}).get("r") if content.get("status") == "ok" else None
        if not isinstance(answer, dict) or answer.get("status") != "ok":
            why = answer.get("ename", "") if isinstance(answer, dict) else content.get("ename", "no reply")
            raise RefusedReply(f"the kernel did not answer the grader's request ({str(why)[:200]})")
        text = (answer.get("data") or {}).get("text/plain")
        if not isinstance(text, str):
            raise RefusedReply("the kernel's answer to the grader was not text")
        return text

    async def _wait(self, msg_id: str, timeout: float, answer: Callable[[str], str]) -> dict:
        """The reply to msg_id within `timeout`; the kernel's output meanwhile is dropped (the request's is not a
        cell's). Past the time: interrupt, then CallTimedOut, or KernelLost if the kernel does not come back."""
        kc = self.client.kc
        deadline = time.monotonic() + timeout
        wait, checked = 0.001, time.monotonic()  # short waits while calls come back fast, longer for slow ones
        while True:
            await self._drop_output()
            if await self._answer_callbacks(msg_id, answer):
                wait = 0.001
            try:
                msg = await kc.shell_channel.get_msg(timeout=wait)
            except Empty:
                wait = min(2 * wait, 0.05)
                if time.monotonic() - checked > 0.2:
                    checked = time.monotonic()
                    if not await ensure_async(kc.is_alive()):
                        raise KernelLost(self._why_dead()) from None
                if time.monotonic() >= deadline:
                    break
                continue
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg
        await ensure_async(self.client.km.interrupt_kernel())
        try:
            await kc.shell_channel.get_msg(timeout=self.client.stuck_grace)
        except Empty:
            raise IgnoredInterrupt(f"ran past the {timeout:.0f} s limit and its kernel ignored the interrupt") from None
        raise CallTimedOut(f"a call into the submission's code was still running after {timeout:.0f} s")

    async def _answer_callbacks(self, msg_id: str, answer: Callable[[str], str]) -> bool:
        """Answer the kernel's calls of the judge's functions (input requests of this request only); any answered?"""
        stdin, answered = self.client.kc.stdin_channel, False
        while True:
            try:
                msg = await stdin.get_msg(timeout=0)
            except Empty:
                return answered
            answered = True
            prompt = (msg.get("content") or {}).get("prompt")
            if msg.get("msg_type") != "input_request" or msg["parent_header"].get("msg_id") != msg_id:
                continue
            ok = isinstance(prompt, str) and prompt.startswith(CALLBACK_PROMPT)
            self.client.kc.input(answer(prompt[len(CALLBACK_PROMPT):]) if ok else "\x04")  # EOF for any other input()

    async def _drop_output(self) -> None:
        iopub = self.client.kc.iopub_channel
        for _ in range(10_000):
            try:
                await iopub.get_msg(timeout=0)
            except Empty:
                return

    def _why_dead(self) -> str:
        limit = self.client._limit_exceeded()
        return f"the grader killed the kernel: {limit}" if limit else "the kernel died during the hidden tests"

