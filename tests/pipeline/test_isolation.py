"""Hostile submissions graded with the compact class reach only their own processes and cost only their own points.

A kernel that sends SIGKILL to everything it can and a fork bomb are graded beside the rest of the
class (two workers): each sandboxed kernel is PID 1 of a PID namespace of its own, under a process cap.
"""

from __future__ import annotations

import re

import nbformat
import pytest

from autograder.isolation import sandbox
from tests.pipeline.compact_class import FILTER

pytestmark = [pytest.mark.pipeline,
              pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                 reason=f"no sandbox here: {sandbox.unavailable_reason()}"),
              pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the graded class")]


def outputs(graded, student: str) -> list[dict]:
    return [o for c in nbformat.read(graded.autograded(student), 4).cells for o in c.get("outputs", [])]


def test_a_kernel_that_kills_everything_it_can_reaches_only_its_own_processes(graded):
    """While the killer spends 11 s sending SIGKILL to -1 and to every pid, the other worker grades the rest
    of the class, which loses only the points of its own mistakes (test_pipeline's per-sample check)."""
    assert graded.failed("hostile_kills_everyone") == []
    printed = "".join(o.get("text", "") for o in outputs(graded, "hostile_kills_everyone"))
    seen = re.search(r"processes seen: \[(.*?)\] signalled: \[(.*?)\] and its own threads", printed)
    assert seen, "the killer's cell should have run inside the sandbox (else the test proves nothing)"
    assert seen.groups() == ("1", ""), f"it saw only itself (PID 1) and signalled nothing else: {seen.groups()}"
    assert all(graded.failed("reference", a) == [] for a in {r["assignment"] for r in graded.results
                                                             if r["student_id"] == "reference"})


def test_a_fork_bomb_is_stopped_by_the_process_cap_and_costs_only_its_own_points(graded):
    assert graded.failed("hostile_fork_bomb") == ["test_maxpool"]
    # Stopped by the cap: maxpool2d was never defined, or the test could not even start a thread while the
    # bomb's children hold the kernel's whole quota; on a slow machine, killed with its bomb after the timeout.
    message = graded.rows("hostile_fork_bomb")["test_maxpool"]["message"]
    assert any(s in message for s in ("NameError", "can't start new thread", "ran past the time limit")), message
    errors = "".join(f"{o.get('ename')}: {o.get('evalue')}" for o in outputs(graded, "hostile_fork_bomb")
                     if o.get("output_type") == "error")
    assert "refusing to fork-bomb" not in errors, "the guard stopped it: the sandbox was not there"
