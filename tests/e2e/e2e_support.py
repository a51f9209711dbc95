"""Real Dagster server processes for end-to-end tests, and bounded waits on what they do.

Each server runs in its own session so that stopping it (SIGTERM, then SIGKILL after a grace
period) also stops the code servers, run workers and step processes it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import psutil
from dagster import DagsterInstance, DagsterRun, RunsFilter

ROOT = Path(__file__).parents[2]
ARTIFACTS = ROOT / "artifacts" / "e2e"
STOP_GRACE_S = 20.0
T = TypeVar("T")

BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


def instance_yaml(*, with_daemon: bool) -> str:
    """dagster.yaml for a test instance; without a daemon, runs launch at once (no queue)."""
    text = "telemetry:\n  enabled: false\nnux:\n  enabled: false\n"
    if not with_daemon:
        text += (
            "run_coordinator:\n  module: dagster._core.run_coordinator\n"
            "  class: DefaultRunCoordinator\n"
        )
    return text


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Service:
    """A server process started for a test; its output goes to `log`."""

    def __init__(self, name: str, argv: Sequence[str], env: Mapping[str, str], log: Path):
        self.name, self.log = name, log
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                list(argv),
                cwd=ROOT,
                env=dict(env),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def check_alive(self) -> None:
        """Fail with the tail of the server's log if it has exited."""
        if self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise AssertionError(f"{self.name} exited with {self.process.returncode}:\n{tail}")

    def stop(self) -> None:
        """SIGTERM the server and everything it started; SIGKILL what outlives the grace."""
        try:
            root = psutil.Process(self.process.pid)
            family = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            family = []
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        for proc in family:
            _signal(proc, signal.SIGTERM)
        _, alive = psutil.wait_procs(family, timeout=STOP_GRACE_S)
        for proc in alive:
            _signal(proc, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)
        self.process.wait(timeout=5)


def _signal(proc: psutil.Process, sig: int) -> None:
    try:
        proc.send_signal(sig)
    except psutil.NoSuchProcess:
        pass


def wait_until(
    probe: Callable[[], T | None],
    *,
    timeout_s: float,
    what: str,
    services: Sequence[Service] = (),
    every_s: float = 1.0,
) -> T:
    """Poll `probe` until it returns something other than None; fail after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        for service in services:
            service.check_alive()
        found = probe()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(every_s)


def http_ok(url: str) -> bool | None:
    """True if `url` answers 200, None while it does not (yet)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return True if response.status == 200 else None
    except OSError:
        return None


def finished_run(instance: DagsterInstance, **tags: str) -> DagsterRun | None:
    """The newest run with these tags once it has finished, else None."""
    runs = instance.get_runs(RunsFilter(tags=tags), limit=1)
    return runs[0] if runs and runs[0].is_finished else None


@dataclass(frozen=True)
class ExampleEnv:
    """A temporary DAGSTER_HOME and the folders the example pipeline reads and writes."""

    home: Path
    inbox: Path
    logs: Path
    reports: Path  # where a run-report sensor writes (env E2E_REPORT_DIR)
    env: dict[str, str]  # environment for the servers

    def instance(self) -> DagsterInstance:
        """The servers' instance, opened in the test process."""
        return DagsterInstance.from_config(str(self.home))


def example_env(base: Path, *, with_daemon: bool) -> ExampleEnv:
    """Folders and environment for servers that load `example_project.definitions`."""
    home, inbox, logs = base / "dagster_home", base / "inbox", base / "logs"
    for folder in (home, inbox, logs):
        folder.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(instance_yaml(with_daemon=with_daemon))
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "VEGETATION_INBOX": str(inbox),
        "VEGETATION_CHECKPOINTS": (base / "checkpoints").as_uri(),
        "VEGETATION_UNIT_SECONDS": "0",
        "E2E_REPORT_DIR": str(base / "reports"),
        "PYTHONUNBUFFERED": "1",
    }
    return ExampleEnv(home, inbox, logs, base / "reports", env)


class Services:
    """The servers a test started; `stop_all` stops every one of them."""

    def __init__(self) -> None:
        self.started: list[Service] = []

    def start(self, name: str, argv: Sequence[str], env: Mapping[str, str], log: Path) -> Service:
        service = Service(name, argv, env, log)
        self.started.append(service)
        return service

    def stop_all(self) -> None:
        """Stop every server, then keep its log as `artifacts/e2e/<name>.log`."""
        for service in reversed(self.started):
            service.stop()
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(service.log, ARTIFACTS / f"{service.name}.log")
