"""Two grading runs at once write one class gradebook on a real PostgreSQL server (nbgrader's db_url).

This is how runs on several machines (or one per section) share a gradebook. The server is a
throw-away cluster in the test's folder, on loopback; `.ci/run` installs Debian's postgresql
when it is missing.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from tests.pipeline.grader import copy_samples, finish, start_grader

pytestmark = pytest.mark.pipeline


def postgres_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def as_postgres(*cmd: str) -> list[str]:
    """Run a server command as the `postgres` user when we are root (PostgreSQL refuses to run as root)."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else list(cmd)


@pytest.fixture
def postgres_url():
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (.ci/run installs Debian's postgresql)")
    data = Path(tempfile.mkdtemp(prefix="kit-pg-"))  # not under pytest's folder, which only root may enter
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    subprocess.run(as_postgres(str(bin_dir / "initdb"), "-D", str(data / "db"), "--auth=trust", "-U", "kit"),
                   check=True, capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(as_postgres(str(bin_dir / "postgres"), "-D", str(data / "db"), "-p", str(port),
                                          "-h", "127.0.0.1", "-k", str(data)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run([str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                             capture_output=True).returncode != 0:
            assert time.monotonic() < deadline and server.poll() is None, "PostgreSQL did not start"
            time.sleep(0.2)
        subprocess.run([str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "kit", "course"],
                       check=True, capture_output=True)
        yield f"postgresql://kit@127.0.0.1:{port}/course"
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


def test_two_runs_at_once_share_one_postgresql_gradebook(release, tmp_path, postgres_url):
    sections = {"section_a": "reference", "section_b": "buggy_fma"}
    runs = {section: start_grader(copy_samples(tmp_path / section, [(student, "01_tensors")]),
                                  tmp_path / f"out_{section}", "--assignments", "01_tensors", "--db-url", postgres_url)
            for section, student in sections.items()}
    for section, run in runs.items():
        finish(run, tmp_path / f"out_{section}")
    with Gradebook(postgres_url) as gb:
        recorded = {s.student.id: s.score for s in gb.assignment_submissions("01_tensors")}
        assert [a.name for a in gb.assignments] == ["01_tensors"]
    assert recorded == {"reference": 12, "buggy_fma": 11}
