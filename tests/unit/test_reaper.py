"""isolation/limits.py's clean-up with real processes: what a submission detaches is found and killed.

Each case runs in a fresh Python process (the grading worker's part), so that neither becoming a
child subreaper nor killing every descendant touches the test runner. A submission's "detached"
process is a `sleep` started in a new session by a process that exits at once (a double fork):
it outlives its parent, as a server or a DataLoader worker left behind would.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from autograder.paths import REPO

WORKER = """
import json, os, subprocess, sys, time
import psutil
from autograder.isolation.limits import become_subreaper, kill_descendants

if sys.argv[1] == "subreaper":
    become_subreaper()
detach = ("import subprocess; print(subprocess.Popen(['sleep', '300'], start_new_session=True, "
          "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)")
orphan = int(subprocess.run([sys.executable, "-c", detach], capture_output=True, text=True, check=True).stdout)
spared = subprocess.Popen(["sh", "-c", "sleep 300; true"])  # sh stays, with a sleep below it
deadline = time.monotonic() + 10
while not psutil.Process(spared.pid).children():
    assert time.monotonic() < deadline, "the spared shell never started its sleep"
    time.sleep(0.02)
parent = int(open(f"/proc/{orphan}/stat").read().rsplit(")", 1)[1].split()[1])
killed = kill_descendants(spare={spared.pid})
report = {"worker": os.getpid(), "orphan": orphan, "orphan_parent": parent, "killed": killed,
          "orphan_alive": os.path.exists(f"/proc/{orphan}"), "spared_alive": spared.poll() is None}
kill_descendants()  # the spared shell and its sleep too, now
print(json.dumps(report))
"""


def run_worker(mode: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO)]))
    proc = subprocess.run([sys.executable, "-c", WORKER, mode], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, "the worker itself must survive the clean-up: " + proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def alive(pid: int) -> bool:
    """A live process (a zombie left for its parent to collect counts as gone)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def kill_if_alive(pid: int) -> None:
    """Kill the sleep this test started if the clean-up under test missed it."""
    if alive(pid):
        os.kill(pid, signal.SIGKILL)


def test_a_detached_process_is_adopted_and_killed_and_the_spared_one_survives():
    report = run_worker("subreaper")
    try:
        assert report["orphan_parent"] == report["worker"], "the subreaper worker adopts what its children detach"
        assert report["killed"] == 1, "only the orphan: the spared shell and its sleep are left alone"
        assert not report["orphan_alive"] and not alive(report["orphan"])
        assert report["spared_alive"]
    finally:
        kill_if_alive(report["orphan"])


def test_without_the_subreaper_a_detached_process_escapes_the_clean_up():
    """Why the worker becomes a subreaper: otherwise the orphan is re-parented away and never found."""
    report = run_worker("plain")
    try:
        assert report["orphan_parent"] != report["worker"]
        assert report["killed"] == 0 and report["orphan_alive"]
    finally:
        kill_if_alive(report["orphan"])
