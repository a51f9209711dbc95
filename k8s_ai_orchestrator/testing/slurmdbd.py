"""Slurm accounting for the test clusters, as production keeps it: one MariaDB server owned by
the tests, and per cluster a slurmdbd of its own (its own port and its own database in that
server) that slurmctld sends every job and step to, so `sacct` and slurmrestd's `/slurmdb/`
endpoints answer with MaxRSS, TotalCPU and TRES.

Needs the Debian packages `mariadb-server` (`mariadbd`, `mariadb-install-db`, the `mariadb`
client and its `mysql` system user) and, for Slurm 22.05, `slurmdbd`; a Slurm built from source
(`scripts/build-slurm.sh`) brings its own slurmdbd. The server is a fresh instance in a
temporary directory, run as the `mysql` user, on a free loopback port and a socket in that
directory; the system's MariaDB service is neither used nor changed. `stop()` ends it and
removes the directory.

Example:
    >>> with LocalMariaDB() as db, LocalSlurmCluster(accounting=db) as cluster:  # doctest: +SKIP
    ...     print(cluster.run(["sacct", "-n", "-X", "-o", "JobID"]).stdout)
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import BackendError

MARIADB_PROGRAMS = ("mariadbd", "mariadb-install-db", "mariadb")
SERVER_USER = "mysql"  # the unprivileged account Debian's mariadb-server creates
DBD_USER = "slurm"  # the MariaDB account every slurmdbd signs in with


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def missing_accounting_programs(prefix: Path | None = None) -> list[str]:
    """MariaDB's programs and slurmdbd (Debian's, or `prefix/sbin/slurmdbd` for a Slurm built
    from source) that are not installed, and the `mysql` user if it is missing."""
    search = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    missing = [name for name in MARIADB_PROGRAMS if shutil.which(name, path=search) is None]
    slurmdbd = (
        (prefix / "sbin" / "slurmdbd").exists() if prefix else shutil.which("slurmdbd", path=search)
    )
    if not slurmdbd:
        missing.append("slurmdbd")
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        missing.append(f"the '{SERVER_USER}' user")
    return missing


class LocalMariaDB:
    """A throw-away MariaDB server for the slurmdbd of each test cluster.

    Args:
        startup_timeout_s: how long to wait for the server to accept connections.

    Example:
        >>> db = LocalMariaDB().start()  # doctest: +SKIP
        >>> db.sql("SELECT 1")  # doctest: +SKIP
        '1\\n'
        >>> db.stop()  # doctest: +SKIP
    """

    def __init__(self, startup_timeout_s: float = 60.0) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="k8sai-mariadb-"))
        self.port = free_port()
        self.password = os.urandom(16).hex()
        self.startup_timeout_s = startup_timeout_s
        self._server: subprocess.Popen[bytes] | None = None

    @property
    def socket_path(self) -> Path:
        return self.root / "mysqld.sock"

    def start(self) -> LocalMariaDB:
        """Create the data directory, start the server, and add the account slurmdbd uses."""
        missing = [n for n in missing_accounting_programs() if n != "slurmdbd"]
        if missing:
            raise BackendError(
                f"cannot start a local MariaDB: {', '.join(missing)} not installed; "
                "run scripts/install-system-deps.sh (Debian: mariadb-server)"
            )
        account = pwd.getpwnam(SERVER_USER)
        os.chown(self.root, account.pw_uid, account.pw_gid)
        self._install()
        log = open(self.root / "server.out", "wb")  # noqa: SIM115
        with log:
            self._server = subprocess.Popen(
                ["mariadbd", "--no-defaults", *self._server_options()],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready()
            self.sql(
                f"CREATE USER '{DBD_USER}'@'127.0.0.1' IDENTIFIED BY '{self.password}'; "
                f"GRANT ALL ON *.* TO '{DBD_USER}'@'127.0.0.1';"
            )
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Shut the server down (SIGTERM, then SIGKILL) and remove its directory."""
        proc, self._server = self._server, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalMariaDB:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def sql(self, statements: str, timeout_s: float = 30.0) -> str:
        """Run SQL as MariaDB's root (over the socket, as this host's root); its output."""
        argv = ["mariadb", "--no-defaults", f"--socket={self.socket_path}", "-u", "root", "-N"]
        done = subprocess.run(
            [*argv, "-e", statements], capture_output=True, text=True, timeout=timeout_s
        )
        if done.returncode != 0:
            raise BackendError(f"mariadb: {done.stderr.strip()}; log in {self.root}")
        return done.stdout

    def _server_options(self) -> list[str]:
        r = self.root
        return [
            f"--datadir={r}/data",
            f"--socket={self.socket_path}",
            f"--pid-file={r}/mariadbd.pid",
            f"--log-error={r}/error.log",
            f"--user={SERVER_USER}",
            "--bind-address=127.0.0.1",
            f"--port={self.port}",
            "--skip-name-resolve",
            # small: a test database holds a few hundred jobs
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=8M",
            # slurmdbd's documented settings (accounting.html, "MySQL Configuration")
            "--innodb-lock-wait-timeout=900",
            "--max-allowed-packet=16M",
        ]

    def _install(self) -> None:
        argv = [
            "mariadb-install-db",
            "--no-defaults",
            f"--datadir={self.root}/data",
            f"--user={SERVER_USER}",
            "--auth-root-authentication-method=socket",
            "--skip-test-db",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise BackendError(f"mariadb-install-db failed: {done.stderr.strip()[-500:]}")

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            if self._server is not None and self._server.poll() is not None:
                raise BackendError(f"mariadbd exited; see {self.root / 'error.log'}")
            try:
                self.sql("SELECT 1", timeout_s=5)
                return
            except (BackendError, subprocess.TimeoutExpired):
                if time.monotonic() > deadline:
                    raise BackendError(
                        f"mariadbd not ready after {self.startup_timeout_s:g}s; see "
                        f"{self.root / 'error.log'}"
                    ) from None
                time.sleep(0.2)


@dataclass(frozen=True)
class Slurmdbd:
    """One cluster's slurmdbd: its port, its database in `db`, and the files it needs.

    Args:
        db: the MariaDB server holding the database.
        root: the cluster's directory (etc/, log/, run/, munge/ as `LocalSlurmCluster` makes).
        cluster: the cluster's `ClusterName`.
        port: slurmdbd's `DbdPort`.
    """

    db: LocalMariaDB
    root: Path
    cluster: str
    port: int

    @property
    def database(self) -> str:
        """The cluster's own database (`StorageLoc`): unique per slurmdbd port."""
        return f"slurm_acct_{self.cluster}_{self.port}"

    def slurm_conf_lines(self) -> list[str]:
        """slurm.conf's accounting lines: every job and step goes to this slurmdbd, GPUs
        counted as TRES. (AuthInfo's munge socket is not used to reach slurmdbd:
        AccountingStoragePass names it.)"""
        return [
            "AccountingStorageType=accounting_storage/slurmdbd",
            "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={self.port}",
            f"AccountingStoragePass={self.root}/munge/munge.sock",
            "AccountingStorageTRES=gres/gpu",
        ]

    def slurmdbd_conf(self) -> str:
        r = self.root
        lines = [
            "AuthType=auth/munge",
            f"AuthInfo=socket={r}/munge/munge.sock",
            # slurmrestd's /slurmdb/ endpoints reach slurmdbd with the user's JWT
            "AuthAltTypes=auth/jwt",
            f"AuthAltParameters=jwt_key={r}/etc/jwt.key",
            "DbdHost=localhost",
            "DbdAddr=127.0.0.1",
            f"DbdPort={self.port}",
            "SlurmUser=root",
            f"PidFile={r}/run/slurmdbd.pid",
            f"LogFile={r}/log/slurmdbd.log",
            "DebugLevel=info",
            "StorageType=accounting_storage/mysql",
            "StorageHost=127.0.0.1",
            f"StoragePort={self.db.port}",
            f"StorageUser={DBD_USER}",
            f"StoragePass={self.db.password}",
            f"StorageLoc={self.database}",
        ]
        return "\n".join(lines) + "\n"

    def supervisor_lines(self, conf: str) -> list[str]:
        """Lines of the cluster's supervisor script, before slurmctld starts: slurmdbd in the
        foreground of a background job, its port awaited, the cluster added to its database
        (so slurmctld registers at once). `conf`: slurm.conf's path, shell-quoted."""
        log = shlex.quote(str(self.root / "log"))
        wait = (
            f"for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/{self.port}) 2>/dev/null "
            "&& break; sleep 0.1; done"
        )
        return [
            f"slurmdbd -D >{log}/slurmdbd.out 2>&1 &",
            wait,
            f"SLURM_CONF={conf} sacctmgr -i add cluster {self.cluster} >{log}/sacctmgr.out 2>&1",
        ]
