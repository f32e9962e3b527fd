"""Clean-up after a submission (limits.kill_descendants, walked with psutil): a detached process is
adopted and killed, a spared process and what runs below it survive, the caller itself is never hit."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from autograder.isolation.limits import become_subreaper, kill_descendants

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreaper is Linux only")

#: Double-forks a sleeper that calls setsid, prints its pid and exits: the sleeper is an orphan.
DETACH = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        print(os.getpid(), flush=True)
        time.sleep(600)
    os._exit(0)
os.wait()
"""


def run_in_child(test) -> None:
    """Run `test` in a forked child (it becomes a subreaper and kills its descendants, which must not
    touch pytest's own processes); fail with what the child raised."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        code = 0
        try:
            test()
        except BaseException as err:  # noqa: BLE001 - reported to the parent through the pipe
            os.write(write, repr(err).encode())
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read) as pipe:
        message = pipe.read()
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0, message


def adopted_orphan_and_spared_tree() -> None:
    become_subreaper()
    detacher = subprocess.Popen([sys.executable, "-c", DETACH], stdout=subprocess.PIPE, text=True)
    orphan = int(detacher.stdout.readline())
    detacher.wait()
    spared = subprocess.Popen([sys.executable, "-c", "import subprocess; subprocess.run(['sleep', '600'])"])
    deadline = time.monotonic() + 10
    while not psutil.Process(spared.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    spared_child = psutil.Process(spared.pid).children()[0]
    assert psutil.Process(orphan).ppid() == os.getpid(), "the orphan was re-parented to the subreaper"

    assert kill_descendants(spare={spared.pid}) == 1
    assert not psutil.pid_exists(orphan), "the orphan was killed and reaped"
    assert spared.poll() is None and spared_child.is_running(), "the spared process and its child live on"
    assert kill_descendants() == 2, "then both go"
    assert not psutil.pid_exists(spared.pid) and not spared_child.is_running(), "killed and reaped"
    assert kill_descendants() == 0


def test_kill_descendants_kills_adopted_orphans_and_spares_what_it_is_told() -> None:
    run_in_child(adopted_orphan_and_spared_tree)
