"""What the browser tests drive: a JupyterLab server on loopback and a headless Chromium.

Both are context managers that always clean up (the server's whole process group, kernels
included; the browser and its driver), so a failing test leaves no process behind. Chromium and
its driver come from the system (Debian: `apt-get install chromium chromium-driver`; `.ci/run`
installs them); nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000"]
# Every cell in the page (no windowed rendering), and no pop-up asking to fetch Jupyter news.
LAB_SETTINGS = {"notebook-extension/tracker": {"windowingMode": "none"},
                "apputils-extension/notification": {"fetchNews": "false"}}
T = TypeVar("T")


def missing_browser() -> str | None:
    """Why the browser tests cannot run here, or None."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            return f"{path} not found: apt-get install chromium chromium-driver (.ci/run does)"
    return None


def wait_for(what: str, probe: Callable[[], T], timeout: float, interval: float = 0.5) -> T:
    """Poll `probe` until it returns something truthy; fail with `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str      # http://127.0.0.1:<port>
    token: str
    log: Path

    def get(self, path: str) -> bytes:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read()


@contextlib.contextmanager
def jupyter_lab(root: Path, work: Path, *args: str, timeout: float = 90) -> Iterator[Server]:
    """JupyterLab serving `root` on 127.0.0.1 with a random token; `work` holds its settings, runtime files and log.

    Notebooks open in full (non-windowed) rendering, so every cell's prompt and output is in the
    page, and plots render inline whatever MPLBACKEND the tests run with. Extra `args` go to
    `jupyter lab` (e.g. `--CourseDirectory.root=...` for nbgrader's formgrader).
    """
    for plugin, values in LAB_SETTINGS.items():
        path = work / "settings" / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))
    port, token, log = free_port(), secrets.token_hex(16), work / "jupyter.log"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(work / "runtime"), MPLBACKEND="module://matplotlib_inline.backend_inline",
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    command = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
               f"--ServerApp.port={port}", "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}",
               f"--ServerApp.root_dir={root}", "--ServerApp.allow_root=True",
               f"--LabApp.user_settings_dir={work / 'settings'}", f"--LabApp.workspaces_dir={work / 'workspaces'}",
               *args]
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=root,
                                start_new_session=True)
    server = Server(f"http://127.0.0.1:{port}", token, log)
    try:
        def up() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
            with contextlib.suppress(OSError):
                return bool(server.get("/api/status"))
            return False
        wait_for("jupyter lab to answer", up, timeout)
        yield server
    finally:
        stop_process_group(proc)


def stop_process_group(proc: subprocess.Popen, grace: float = 10) -> None:
    """SIGTERM the process group `proc` leads (the server shuts its kernels down), SIGKILL what remains."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=grace)


@contextlib.contextmanager
def chromium(work: Path, page_timeout: float = 60):
    """A headless Chromium driven by Selenium through the system chromedriver, with a fresh profile."""
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS + [f"--user-data-dir={work / 'chromium-profile'}"]:
        options.add_argument(flag)
    service = Service(executable_path=str(CHROMEDRIVER), log_output=str(work / "chromedriver.log"))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        driver.set_page_load_timeout(page_timeout)
        driver.set_script_timeout(page_timeout)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(work / "chromium-profile", ignore_errors=True)
