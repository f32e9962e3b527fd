"""Hostile submissions reach only their own processes and cost only their own points, with the grader as root
and as an ordinary user.

A kernel that sends SIGKILL to everything it can and a fork bomb are graded beside the rest of the
class (two workers): each sandboxed kernel is PID 1 of a PID namespace of its own, under a process cap.
The same kernels, and one that looks for credentials and other people's files, graded by an ordinary
user's grader, are sandboxed through user namespaces.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder.isolation import sandbox
from autograder.paths import BUILD, REPO
from tests.conftest import read_csv
from tests.pipeline import compact_class
from tests.pipeline.compact_class import FILTER
from tests.pipeline.grader import copy_samples

pytestmark = [pytest.mark.pipeline,
              pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                 reason=f"no sandbox here: {sandbox.unavailable_reason()}")]
whole_class = pytest.mark.skipif(bool(FILTER), reason="KIT_ASSIGNMENTS limits the graded class")


def outputs(graded, student: str) -> list[dict]:
    return [o for c in nbformat.read(graded.autograded(student), 4).cells for o in c.get("outputs", [])]


@whole_class
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


@whole_class
def test_a_fork_bomb_is_stopped_by_the_process_cap_and_costs_only_its_own_points(graded):
    assert graded.failed("hostile_fork_bomb") == ["test_maxpool"]
    # Stopped by the cap: maxpool2d was never defined, or the test could not even start a thread while the
    # bomb's children hold the kernel's whole quota; on a slow machine, killed with its bomb after the timeout.
    message = graded.rows("hostile_fork_bomb")["test_maxpool"]["message"]
    assert any(s in message for s in ("NameError", "can't start new thread", "ran past the time limit")), message
    errors = "".join(f"{o.get('ename')}: {o.get('evalue')}" for o in outputs(graded, "hostile_fork_bomb")
                     if o.get("output_type") == "error")
    assert "refusing to fork-bomb" not in errors, "the guard stopped it: the sandbox was not there"


#: The TA's account for grading as an ordinary user (created for the test where missing; CI runs as root).
TA_USER = "kit-ta"


def _as_ordinary_user(command: list[str], base: Path) -> list[str]:
    """`command` run as TA_USER, as on a JupyterHub account: in a mount namespace of the test's own where the
    interpreter is reachable by that user (on this machine it may live under root's closed home) and
    build/ is the user's own copy of the release, base/build (the grader refreshes the TA's notebook in it)."""
    interpreter = Path(os.path.realpath(sys.executable)).parent.parent
    closed = [p for p in reversed(interpreter.parents) if p != Path("/") and not os.stat(p).st_mode & 0o001]
    steps = []
    if closed:  # bind the closed folder aside, cover it with an open one, bring the interpreter back
        aside = base / "aside"
        steps += [f"mkdir -p {aside}", f"mount --bind {closed[0]} {aside}",
                  f"mount -t tmpfs -o mode=0755 tmpfs {closed[0]}", f"mkdir -p {interpreter}",
                  f"mount --bind {aside / interpreter.relative_to(closed[0])} {interpreter}"]
    steps += [f"mount --bind {base / 'build'} {BUILD}",
              f'exec setpriv --reuid {TA_USER} --regid {TA_USER} --clear-groups -- "$@"']
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", " && ".join(steps), "sh", *command]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("useradd") is None,
                    reason="creating an ordinary user for the test needs root, setpriv and useradd")
@whole_class
def test_grading_as_an_ordinary_user_contains_student_code_as_root_does(release):
    """The grader as an ordinary user (no sudo): kernels in unprivileged user namespaces. A kernel that sends
    SIGKILL to -1 kills nothing of the grader's (which runs as the same user), one that looks for the
    grader's credentials, other users' files and the network finds none, and the class is graded."""
    if subprocess.run(["id", TA_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", TA_USER],
                       check=True)
    base = Path(tempfile.mkdtemp(prefix="kit-ta-"))  # pytest's tmp_path lies in a folder only root may enter
    try:
        _grade_as_ordinary_user(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _grade_as_ordinary_user(base: Path) -> None:
    base.chmod(0o755)
    home, build_copy, out = base / "home", base / "build", base / "out"
    build_copy.mkdir()
    for name in ("source", "release", "gradebook.db", "release-manifest.json"):
        (shutil.copytree if (BUILD / name).is_dir() else shutil.copy2)(BUILD / name, build_copy / name)
    class_dir = copy_samples(base / "class", [("reference", "01_tensors"), ("hostile_kills_everyone", "01_tensors"),
                                                  ("hostile_snoops", "01_tensors")])
    home.mkdir()
    out.mkdir()
    for path in [base, *base.rglob("*")]:
        os.chown(path, *[int(subprocess.check_output(["id", flag, TA_USER])) for flag in ("-u", "-g")])
    env = {**os.environ, **compact_class.PLANTED_SECRETS, "HOME": str(home)}
    proc = subprocess.run(_as_ordinary_user([sys.executable, "-m", "autograder.grade", str(class_dir), str(out),
                                             "--workers", "2"], base),
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "unsandboxed" not in proc.stderr
    grades = {row["student_id"]: row for row in read_csv(out / "grades.csv")}
    assert grades["reference"]["score"] == grades["reference"]["max_score"]
    assert grades["hostile_kills_everyone"]["score"] == grades["hostile_kills_everyone"]["max_score"]
    printed = "".join(o.get("text", "") for c in nbformat.read(out / "autograded" / "hostile_snoops" / "01_tensors" /
                                                              "01_tensors.ipynb", 4).cells
                      for o in c.get("outputs", []))
    assert f"uid {sandbox.USER_MODE_UID} sees" in printed and "reached: []" in printed, printed[-1500:]
    for path in out.rglob("*"):
        if path.is_file():
            assert not [v for v in compact_class.PLANTED_SECRETS.values() if v.encode() in path.read_bytes()], path
