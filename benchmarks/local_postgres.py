"""A PostgreSQL server of the benchmark's own, for a Dagster instance stored in PostgreSQL.

`bench_scale --storage postgres` asks what the run worker costs when the instance is not
SQLite. This starts Debian's PostgreSQL (`initdb` and `postgres` of the `postgresql` package)
as a fresh cluster in a temporary directory, run as the `postgres` user, listening on a free
loopback port only (and a socket in that directory), with one database `dagster` owned by the
role `dagster` (trust authentication: nothing but this machine's loopback can reach it). The
system's PostgreSQL service is neither used nor changed; `stop()` ends the server and removes
the directory. `cpu_s()` is the CPU time the server has spent so far (the postmaster and its
ended backends), so a benchmark can report the storage's own CPU beside the run worker's.

Example:
    >>> with LocalPostgres() as pg:  # doctest: +SKIP
    ...     print(pg.url)  # postgresql+psycopg2://dagster@127.0.0.1:<port>/dagster
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

SERVER_USER = "postgres"  # the unprivileged account Debian's postgresql package creates
ROLE = "dagster"
DATABASE = "dagster"


def _program(name: str) -> str:
    """A PostgreSQL server program: on PATH, else in Debian's versioned directory."""
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (Debian package postgresql)")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalPostgres:
    """A fresh PostgreSQL cluster in a temporary directory, on loopback (see module doc)."""

    def __init__(self, startup_timeout_s: float = 60.0) -> None:
        self.port = _free_port()
        self.root = Path(tempfile.mkdtemp(prefix="k8s-ai-bench-pg-"))
        self._timeout_s = startup_timeout_s
        self._server: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The database's SQLAlchemy URL, naming psycopg2 (what dagster-postgres installs;
        SQLAlchemy 2.1 would otherwise take psycopg 3)."""
        return f"postgresql+psycopg2://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> LocalPostgres:
        account = pwd.getpwnam(SERVER_USER)
        os.chmod(self.root, 0o700)
        os.chown(self.root, account.pw_uid, account.pw_gid)
        data = self.root / "data"
        as_server = ["runuser", "-u", SERVER_USER, "--"]
        subprocess.run(
            [*as_server, _program("initdb"), "-D", str(data), "-U", ROLE, "--auth=trust"],
            check=True,
            capture_output=True,
        )
        options = ["-h", "127.0.0.1", "-p", str(self.port), "-k", str(self.root)]
        self._server = subprocess.Popen(
            [*as_server, _program("postgres"), "-D", str(data), *options],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "server.log", "wb"),  # noqa: SIM115 (the server keeps it)
            start_new_session=True,
        )
        self._wait_ready()
        self._psql("postgres", f"CREATE DATABASE {DATABASE}")
        return self

    def stop(self) -> None:
        """Fast shutdown (SIGINT to the postmaster), then the directory goes."""
        server, self._server = self._server, None
        if server is not None:
            pid = self._postmaster_pid()
            if pid is not None:
                os.kill(pid, signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cpu_s(self) -> float:
        """CPU seconds the server has used: the postmaster's own and its ended children's
        (each connection's backend ends with its connection)."""
        pid = self._postmaster_pid()
        if pid is None:
            return 0.0
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        return ticks / os.sysconf("SC_CLK_TCK")

    def _postmaster_pid(self) -> int | None:
        try:
            return int((self.root / "data" / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def _psql(self, database: str, statement: str) -> str:
        done = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", ROLE, "-d", database]
            + ["-v", "ON_ERROR_STOP=1", "-Atc", statement],
            capture_output=True,
            text=True,
            timeout=30,
        )
        if done.returncode != 0:
            raise RuntimeError(f"psql {statement!r}: {done.stderr.strip()}")
        return done.stdout

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._timeout_s
        while True:
            assert self._server is not None
            if self._server.poll() is not None:
                log = (self.root / "server.log").read_text(errors="replace")
                raise RuntimeError(f"postgres exited at start: {log[-2000:]}")
            try:
                self._psql("postgres", "SELECT 1")
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
