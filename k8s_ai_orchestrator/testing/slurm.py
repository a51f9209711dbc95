"""A real Slurm cluster on one machine, for tests: munged, slurmctld, slurmrestd and one slurmd
per node (and with `accounting` a slurmdbd), all in one PID namespace so that stopping the
cluster is one kill.

Needs the Debian packages `slurm-wlm slurmrestd munge slurm-wlm-jwt-plugin` (22.05), or with
`prefix` a Slurm built from source (`scripts/build-slurm.sh`: 24.11, `munge` still Debian's),
root (the daemons run as root with `SlurmUser=root`) and `unshare`; with `accounting` also
`mariadb-server` and (22.05) `slurmdbd` (`slurmdbd.py`). Every file lives in one temporary
directory; ports are picked free; `stop()` leaves nothing behind, not even the cgroups slurmd
made. The files it writes are `slurmconf.py`'s.

Example:
    >>> with LocalSlurmCluster() as cluster:  # doctest: +SKIP
    ...     print(cluster.run(["sinfo", "-h", "-o", "%D %t"]).stdout)
    3 idle
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..backends.slurm.config import SlurmConfig
from ..errors import BackendError
from .slurmconf import CLUSTER_NAME, PARTITION, ClusterFiles, LocalNode
from .slurmdbd import LocalMariaDB, Slurmdbd, free_port, missing_accounting_programs

DAEMONS = ("munged", "slurmctld", "slurmd", "slurmrestd", "unshare")
__all__ = [
    "DEFAULT_NODES",
    "PARTITION",
    "LocalMariaDB",
    "LocalNode",
    "LocalSlurmCluster",
    "missing_slurm_programs",
]


DEFAULT_NODES = (
    LocalNode("n1", gpus=2),
    LocalNode("n2", gpus=2),
    LocalNode("n3"),
)


def missing_slurm_programs(prefix: Path | None = None) -> list[str]:
    """The daemons this module needs that are not on PATH, or not in `prefix/sbin` for a Slurm
    built from source (empty when all are there)."""
    search = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    if prefix is not None:
        search = f"{prefix}/sbin:{prefix}/bin:{search}"
    found = [name for name in DAEMONS if shutil.which(name, path=search) is not None]
    if prefix is not None:  # Slurm's own programs from the prefix only
        found = [n for n in found if n in ("munged", "unshare") or (prefix / "sbin" / n).exists()]
    return [name for name in DAEMONS if name not in found]


def _slurm_cgroups() -> set[Path]:
    """The cgroup v1 directories slurmd makes (/sys/fs/cgroup/memory/slurm_n1, ...)."""
    return set(Path("/sys/fs/cgroup").glob("*/slurm*"))


def _remove_cgroups(directories: set[Path], timeout_s: float = 10.0) -> None:
    """Remove cgroup directories, innermost first, once their killed processes have left
    (best effort: one still busy after `timeout_s` is left)."""
    deadline = time.monotonic() + timeout_s
    for top in directories:
        for path in sorted((p for p in top.rglob("*") if p.is_dir()), reverse=True) + [top]:
            while True:
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.1)


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.write_text(text)
    path.chmod(mode)


class LocalSlurmCluster:
    """Start and stop a throw-away Slurm cluster whose nodes are local slurmd processes.

    Args:
        nodes: the nodes to simulate (at least one).
        root: directory for config, state, logs and the shared workdir; a fresh temporary
            directory (removed on stop) when None.
        rest: also start slurmrestd with JWT authentication.
        prefix: the install prefix of a Slurm built from source (`scripts/build-slurm.sh`
            prints it): its daemons and commands run instead of the Debian packages' (None).
        cgroup_memory: enforce a job's memory with the kernel's cgroup v1 memory controller
            (`TaskPlugin=task/cgroup`, `ConstrainRAMSpace`: the job ends OUT_OF_MEMORY) instead
            of slurmstepd's sampling (`OverMemoryKill`: FAILED, signal 9).
        accounting: keep accounting as production does: a slurmdbd of this cluster's own
            (its own port and database in this started MariaDB server), so `sacct` and
            slurmrestd's /slurmdb/ endpoints know every job; None: no accounting storage.
        startup_timeout_s: how long to wait for every node to become idle.

    Example:
        >>> cluster = LocalSlurmCluster().start()  # doctest: +SKIP
        >>> cluster.env["SLURM_CONF"]  # doctest: +SKIP
        '/tmp/k8sai-slurm-.../etc/slurm.conf'
        >>> cluster.stop()  # doctest: +SKIP
    """

    def __init__(
        self,
        nodes: Sequence[LocalNode] = DEFAULT_NODES,
        root: Path | None = None,
        *,
        rest: bool = True,
        prefix: Path | None = None,
        cgroup_memory: bool = False,
        accounting: LocalMariaDB | None = None,
        startup_timeout_s: float = 60.0,
    ) -> None:
        if not nodes:
            raise ValueError("LocalSlurmCluster needs at least one node")
        self.nodes = tuple(nodes)
        self._own_root = root is None
        self.root = (
            Path(root) if root is not None else Path(tempfile.mkdtemp(prefix="k8sai-slurm-"))
        )
        self.rest_enabled = rest
        self.prefix = Path(prefix) if prefix is not None else None
        self.cgroup_memory = cgroup_memory
        self.startup_timeout_s = startup_timeout_s
        self.ctld_port = free_port()
        self.rest_port = free_port()
        self.node_ports = {node.name: free_port() for node in self.nodes}
        self.slurmdbd = (
            Slurmdbd(accounting, self.root, CLUSTER_NAME, free_port()) if accounting else None
        )
        self._supervisor: subprocess.Popen[bytes] | None = None
        self._cgroups_before: set[Path] | None = None  # slurm cgroups there before start

    # -- paths and environment -------------------------------------------------------------

    @property
    def conf_path(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def workdir(self) -> Path:
        """A directory every node sees (they share this host): the backend's shared workdir."""
        return self.root / "shared"

    @property
    def rest_url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment for Slurm client commands (sbatch, squeue, ...) talking to this cluster."""
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf_path)
        env["PATH"] = env.get("PATH", "") + ":/usr/sbin:/sbin"
        if self.prefix is not None:
            env["PATH"] = f"{self.prefix}/bin:{self.prefix}/sbin:{env['PATH']}"
        return env

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> LocalSlurmCluster:
        """Write the configuration, start the daemons and wait until every node is idle."""
        missing = missing_slurm_programs(self.prefix)
        if self.slurmdbd is not None:
            missing += missing_accounting_programs(self.prefix)
        if missing:
            raise BackendError(
                f"cannot start a local Slurm cluster: {', '.join(missing)} not installed; "
                "run scripts/install-system-deps.sh (Debian: slurm-wlm slurmrestd munge, and "
                "mariadb-server slurmdbd for accounting)"
            )
        self._write_files()
        self._cgroups_before = _slurm_cgroups()
        log = open(self.root / "log" / "supervisor.log", "wb")  # noqa: SIM115
        with log:
            self._supervisor = subprocess.Popen(
                ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
                + ["bash", str(self.root / "etc" / "supervise.sh")],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        try:
            self.wait_until_idle(self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Kill every daemon and job process (one PID namespace) and remove the directory."""
        proc, self._supervisor = self._supervisor, None
        if proc is not None and proc.poll() is None:
            # unshare --kill-child: when unshare dies, the namespace's init and with it every
            # daemon and job process is killed by the kernel.
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        if self._cgroups_before is not None:
            _remove_cgroups(_slurm_cgroups() - self._cgroups_before)
            self._cgroups_before = None
        if self._own_root:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalSlurmCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers for tests -----------------------------------------------------------------

    def run(self, argv: Sequence[str], timeout_s: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster; raise BackendError on failure."""
        try:
            done = subprocess.run(
                list(argv),
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BackendError(f"{shlex.join(argv)} did not answer in {timeout_s:g}s") from None
        if done.returncode != 0:
            raise BackendError(f"{shlex.join(argv)} failed ({done.returncode}): {done.stderr}")
        return done

    def node_states(self) -> dict[str, str]:
        """Node name → Slurm state ("idle", "alloc", "mix", "down*", ...)."""
        out = self.run(["sinfo", "-h", "-N", "-o", "%N %t"]).stdout
        return dict(line.split() for line in out.splitlines() if line.strip())

    def set_node_state(self, name: str, state: str, reason: str = "test") -> None:
        """`scontrol update nodename=<name> state=<state>` (down, drain, resume...)."""
        argv = ["scontrol", "update", f"nodename={name}", f"state={state}"]
        if state.lower() in ("down", "drain"):
            argv.append(f"reason={reason}")
        self.run(argv)

    def wait_until_idle(self, timeout_s: float = 30.0) -> None:
        """Wait until every node reports idle (no jobs, all up)."""
        deadline = time.monotonic() + timeout_s
        last = "no answer from slurmctld"
        while time.monotonic() < deadline:
            if self._supervisor is not None and self._supervisor.poll() is not None:
                raise BackendError(f"local Slurm supervisor exited; see {self.root / 'log'}")
            try:
                states = self.node_states()
            except BackendError as exc:
                last = str(exc)
            else:
                if len(states) == len(self.nodes) and set(states.values()) == {"idle"}:
                    return
                last = f"node states {states}"
            time.sleep(0.2)
        raise BackendError(
            f"local Slurm not idle after {timeout_s:g}s: {last}; logs in {self.root}"
        )

    def jwt_token(self, user: str = "root", lifespan_s: int = 3600) -> str:
        """A JWT for slurmrestd (`scontrol token`)."""
        out = self.run(["scontrol", "token", f"username={user}", f"lifespan={lifespan_s}"]).stdout
        return out.strip().split("=", 1)[1]

    def backend_config(self, transport: str = "cli", **more: Any) -> SlurmConfig:
        """The Slurm backend's config for this cluster over `transport` ("cli", or "rest" with
        a fresh token for root); `more`: its other fields."""
        if transport == "rest":
            rest = {"rest_url": self.rest_url, "rest_user": "root", "rest_token": self.jwt_token()}
            more = {**rest, **more}
        return SlurmConfig(
            transport=transport,
            workdir=str(self.workdir),
            slurm_conf=str(self.conf_path),
            **more,
        )

    # -- configuration files ---------------------------------------------------------------

    @property
    def files(self) -> ClusterFiles:
        """The cluster's configuration files and supervisor script (`slurmconf.py`)."""
        return ClusterFiles(
            root=self.root,
            nodes=self.nodes,
            ctld_port=self.ctld_port,
            rest_port=self.rest_port,
            node_ports=self.node_ports,
            prefix=self.prefix,
            cgroup_memory=self.cgroup_memory,
            rest=self.rest_enabled,
            slurmdbd=self.slurmdbd,
        )

    def _write_files(self) -> None:
        for sub in ("etc", "log", "run", "state", "spool", "dev", "munge", "shared"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o700)
        _write(self.root / "munge" / "munge.key", os.urandom(128).hex(), 0o600)
        _write(self.root / "etc" / "jwt.key", os.urandom(32).hex(), 0o600)
        for node in self.nodes:
            for index in range(node.gpus):
                device = self.root / "dev" / f"{node.name}-gpu{index}"
                if not device.exists():
                    os.mknod(device, 0o666 | 0o020000, os.makedev(1, 3))
        files = self.files
        _write(self.conf_path, files.slurm_conf(socket.gethostname()))
        _write(self.root / "etc" / "gres.conf", files.gres_conf())
        if self.prefix is not None or self.cgroup_memory:
            # 24.11's slurmd reads cgroup.conf whatever TaskPlugin says; this host mounts the
            # v1 hierarchies (v2 only under /sys/fs/cgroup/unified).
            _write(self.root / "etc" / "cgroup.conf", files.cgroup_conf())
        if self.slurmdbd is not None:  # slurmdbd refuses a slurmdbd.conf others can read
            _write(self.root / "etc" / "slurmdbd.conf", self.slurmdbd.slurmdbd_conf(), 0o600)
        _write(self.root / "etc" / "supervise.sh", files.supervisor_script())
