"""The files a `LocalSlurmCluster` writes: slurm.conf, gres.conf, cgroup.conf, slurmdbd.conf and
the supervisor script that starts its daemons (pure: text from the cluster's layout).

Example:
    >>> files = ClusterFiles(Path("/tmp/c"), (LocalNode("n1"),), 6817, 6820, {"n1": 6818})
    >>> files.rest_plugins
    'openapi/v0.0.38'
    >>> "AccountingStorageType=accounting_storage/none" in files.slurm_conf("host")
    True
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .slurmdbd import Slurmdbd

PARTITION = "debug"
CLUSTER_NAME = "k8saitest"


@dataclass(frozen=True)
class LocalNode:
    """One simulated compute node (a slurmd of its own on this host)."""

    name: str
    cpus: int = 4  # CPUs Slurm believes the node has (the host may have fewer)
    memory_mb: int = 4096
    gpus: int = 0  # fake GPUs: character devices listed in gres.conf


@dataclass(frozen=True)
class ClusterFiles:
    """Where a local cluster's daemons listen and keep their files, and what they run."""

    root: Path  # etc/, log/, run/, state/, spool/, dev/, munge/, shared/
    nodes: tuple[LocalNode, ...]
    ctld_port: int
    rest_port: int
    node_ports: Mapping[str, int]
    prefix: Path | None = None  # a Slurm built from source; None: Debian's 22.05 packages
    cgroup_memory: bool = False  # task/cgroup enforces --mem, not OverMemoryKill
    rest: bool = True  # start slurmrestd
    slurmdbd: Slurmdbd | None = None  # accounting; None: accounting_storage/none

    @property
    def conf_path(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    def slurm_conf(self, host: str) -> str:
        """slurm.conf; `host`: this machine's name (slurmctld's host)."""
        r = self.root
        lines = [
            f"ClusterName={CLUSTER_NAME}",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={self.ctld_port}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={r}/munge/munge.sock,cred_expire=10",
            "AuthAltTypes=auth/jwt",
            f"AuthAltParameters=jwt_key={r}/etc/jwt.key",
            f"StateSaveLocation={r}/state",
            f"SlurmdSpoolDir={r}/spool/%n",
            f"SlurmctldPidFile={r}/run/slurmctld.pid",
            f"SlurmdPidFile={r}/run/slurmd-%n.pid",
            f"SlurmctldLogFile={r}/log/slurmctld.log",
            f"SlurmdLogFile={r}/log/slurmd-%n.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            f"TaskPlugin=task/{'cgroup' if self.cgroup_memory else 'none'}",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "DefMemPerCPU=256",
            "GresTypes=gpu",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=batch_sched_delay=0,sched_interval=2",
            "ReturnToService=2",
            "SlurmdParameters=config_overrides",
            *(
                self.slurmdbd.slurm_conf_lines()
                if self.slurmdbd
                else ["AccountingStorageType=accounting_storage/none"]
            ),
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={r}/log/jobcomp.txt",
            "JobAcctGatherType=jobacct_gather/linux",
            "JobAcctGatherFrequency=task=1",
            *([] if self.cgroup_memory else ["JobAcctGatherParams=OverMemoryKill"]),
            "MpiDefault=none",
            "MailProg=/bin/true",
            "KillWait=5",
            "MessageTimeout=10",
            "InactiveLimit=0",
            "MinJobAge=600",
            f"TmpFS={r}/shared",
        ]
        for node in self.nodes:
            gres = f" Gres=gpu:{node.gpus}" if node.gpus else ""
            lines.append(
                f"NodeName={node.name} NodeHostname=localhost NodeAddr=127.0.0.1 "
                f"Port={self.node_ports[node.name]} CPUs={node.cpus} Boards=1 SocketsPerBoard=1 "
                f"CoresPerSocket={node.cpus} ThreadsPerCore=1 RealMemory={node.memory_mb}"
                f"{gres} State=UNKNOWN"
            )
        lines.append(
            f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=NO"
        )
        return "\n".join(lines) + "\n"

    def cgroup_conf(self) -> str:
        lines = ["CgroupPlugin=cgroup/v1"]
        if self.cgroup_memory:
            lines += ["ConstrainRAMSpace=yes", "ConstrainSwapSpace=yes", "AllowedSwapSpace=0"]
        return "\n".join(lines) + "\n"

    def gres_conf(self) -> str:
        lines = []
        for node in self.nodes:
            if node.gpus:
                last = node.gpus - 1
                files = f"{self.root}/dev/{node.name}-gpu[0-{last}]"
                lines.append(f"NodeName={node.name} Name=gpu File={files}")
        return "\n".join(lines) + "\n"

    @property
    def rest_plugins(self) -> str:
        """22.05 has one plugin per OpenAPI version (dbv0.0.38: the /slurmdb/ endpoints); 24.11
        one for slurmctld and one for slurmdbd, serving every data parser it was built with
        (v0.0.40-v0.0.42)."""
        if self.prefix is None:
            return "openapi/v0.0.38" + (",openapi/dbv0.0.38" if self.slurmdbd else "")
        return "openapi/slurmctld" + (",openapi/slurmdbd" if self.slurmdbd else "")

    def supervisor_script(self) -> str:
        r = self.root
        conf = shlex.quote(str(self.conf_path))
        log = shlex.quote(str(r / "log"))
        munge = (
            f"munged -F --force --key-file={r}/munge/munge.key --socket={r}/munge/munge.sock "
            f"--pid-file={r}/run/munged.pid --seed-file={r}/munge/seed "
            f"--log-file={r}/log/munged.log"
        )
        lines = [
            "set -u",
            f"export SLURM_CONF={conf}",
            f"{munge} &",
            f"for _ in $(seq 100); do [ -S {r}/munge/munge.sock ] && break; sleep 0.05; done",
            *(self.slurmdbd.supervisor_lines(conf) if self.slurmdbd else []),
            f"slurmctld -D -i -f {conf} >{log}/slurmctld.out 2>&1 &",
        ]
        for node in self.nodes:
            lines.append(f"slurmd -D -N {node.name} -f {conf} >{log}/slurmd-{node.name}.out 2>&1 &")
        if self.rest:
            lines.append(
                "SLURMRESTD_SECURITY=disable_user_check SLURM_JWT=daemon "
                f"slurmrestd -f {conf} -a rest_auth/jwt -s {self.rest_plugins} "
                f"127.0.0.1:{self.rest_port} "
                f">{log}/slurmrestd.out 2>&1 &"
            )
        lines.append("wait")
        return "\n".join(lines) + "\n"
