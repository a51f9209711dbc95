"""One control-plane process: started in its own process group, logged to a file, probed
until ready, and stopped with SIGTERM to the group, then SIGKILL.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> log = Path(tempfile.mkdtemp()) / "sleep.log"
    >>> proc = Component("sleeper", ["sleep", "30"], log).start()
    >>> proc.running
    True
    >>> proc.stop()
    >>> proc.running
    False
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ...errors import OrchestratorError

Probe = Callable[[], str | None]  # None when ready, else why not (for the timeout message)


class ControlPlaneError(OrchestratorError):
    """A control-plane component did not start, did not become ready, or could not be found."""


def machine_lock(path: Path, busy: str) -> IO[str]:
    """Hold an exclusive flock on `path` (its directory made) for one machine-wide resource;
    close the returned file to release it. Raises `ControlPlaneError` "`busy` (`path` is
    locked)" at once when another process holds it: a second test run is told before it
    creates anything.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "demo.lock"
        >>> held = machine_lock(path, "another demo runs")
        >>> machine_lock(path, "another demo runs")
        Traceback (most recent call last):
        ...
        k8s_ai_orchestrator.testing.controlplane.process.ControlPlaneError: another demo runs ...
        >>> held.close()
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = path.open("w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise ControlPlaneError(f"{busy} ({path} is locked)") from None
    return lock


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class HttpsTarget:
    """Where and how to send a probe: URL, optional bearer token, CA file (None: no verify)."""

    url: str
    token: str | None = None
    ca_file: Path | None = None

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        """GET `path`; returns (status, body), status 0 when the server cannot be reached."""
        return self.call("GET", path, timeout_s)

    def call(self, method: str, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        """Send `method` (no body) to `path`; returns (status, body) as `get` does."""
        request = urllib.request.Request(self.url + path, method=method)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        context: ssl.SSLContext | None = None
        if self.url.startswith("https"):
            context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
            if self.ca_file is None:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        try:
            with urllib.request.urlopen(request, timeout=timeout_s, context=context) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), error.read()
        except (OSError, ssl.SSLError):
            return 0, b""

    def probe(self, path: str) -> Probe:
        """A readiness probe: ready once `path` answers 200."""

        def check() -> str | None:
            status, body = self.get(path)
            if status == 200:
                return None
            if status == 0:
                return f"{self.url}{path}: no answer"
            return f"{self.url}{path}: HTTP {status} {body[:200]!r}"

        return check


class Component:
    """A process of the control plane.

    Args:
        name: a label for messages and the log file, e.g. "apiserver-host".
        argv: the full command line.
        log_path: stdout and stderr go here.
        clock, sleep: injected so tests can drive time.
        env: the process's environment (default: this process's).
        cwd: its working directory (default: this process's).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.ready_after_s: dict[str, float] = {}  # seconds from start, per wait_ready `what`
        self._clock = clock
        self._sleep = sleep
        self._popen: subprocess.Popen[bytes] | None = None
        self._started_at = 0.0

    @property
    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self._popen is not None and self._popen.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id (also its process group id), None before start."""
        return self._popen.pid if self._popen else None

    def start(self) -> Component:
        """Start the process in a new session (own process group); returns self."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self.env,
                cwd=self.cwd,
            )
        self._started_at = self._clock()
        return self

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of the component's log, for error messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, probe: Probe, timeout_s: float, what: str = "ready") -> float:
        """Poll `probe` until it is true; returns seconds since start.

        Raises:
            ControlPlaneError: the process exited or `timeout_s` passed; the message holds the
                log path and its tail.
        """
        deadline = self._clock() + timeout_s
        while (why := probe()) is not None:
            if not self.running:
                raise ControlPlaneError(
                    f"{self.name} exited before it was {what}; log {self.log_path}:\n"
                    + self.log_tail()
                )
            if self._clock() > deadline:
                raise ControlPlaneError(
                    f"{self.name} not {what} after {timeout_s:.0f} s ({why}); raise the "
                    f"timeout on a slow machine or read {self.log_path}:\n" + self.log_tail()
                )
            self._sleep(0.1)
        self.ready_after_s[what] = self._clock() - self._started_at
        return self.ready_after_s[what]

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s`; reaps the process."""
        if self._popen is None:
            return
        for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self._popen.pid, sig)
            except ProcessLookupError:
                break
            try:
                self._popen.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                continue
            try:  # the leader is gone; take down anything it left in its group
                os.killpg(self._popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
        self._popen.poll()
