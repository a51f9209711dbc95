"""Slurm accounting in the test clusters (testing/slurmdbd.py): each cluster's slurmdbd keeps
its jobs in its own database of one test-owned MariaDB, which listens on loopback only and
leaves nothing behind."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from slurm_support import launch_request, wait_for_status

from k8s_ai_orchestrator.backends.slurm import SlurmBackend
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster
from k8s_ai_orchestrator.testing.slurmdbd import LocalMariaDB, missing_accounting_programs
from tests.requirements import INSTALL_DEPS, require

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(120)]


def test_a_local_mariadb_listens_on_loopback_only_and_stops_leaving_nothing() -> None:
    missing = missing_accounting_programs()
    require(f"MariaDB ({', '.join(missing)})", not missing, INSTALL_DEPS)
    db = LocalMariaDB().start()
    try:
        pid = int((db.root / "mariadbd.pid").read_text())
        assert db.sql("SELECT @@bind_address, @@port").split() == ["127.0.0.1", str(db.port)]
        assert Path(f"/proc/{pid}").exists()
    finally:
        db.stop()

    assert not db.root.exists()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists():  # a zombie is reaped by stop(); give the kernel time
        assert time.monotonic() < deadline, f"mariadbd {pid} still running"
        time.sleep(0.1)


def test_each_cluster_keeps_its_jobs_in_a_database_of_its_own(
    versioned_cluster: LocalSlurmCluster,
) -> None:
    backend = SlurmBackend(versioned_cluster.backend_config("cli"), rss_sample_interval_s=0)
    handle = backend.submit(launch_request(["true"], nodes=1, gpu=1))
    wait_for_status(backend, handle, lambda s: s.is_terminal)

    # slurmctld sends the job's start, then its end, to slurmdbd a moment after each
    fields = "JobID,State,AllocTRES"
    deadline = time.monotonic() + 30
    while not (rows := _sacct(versioned_cluster, handle.job_id, fields)) or (
        rows[0].split("|")[1] in ("PENDING", "RUNNING")
    ):
        assert time.monotonic() < deadline, f"slurmdbd has no record of the job's end: {rows}"
        time.sleep(0.2)

    assert rows[0].split("|")[:2] == [handle.job_id, "COMPLETED"]
    assert "gres/gpu=1" in rows[0].split("|")[2]  # GPUs are accounted as TRES
    slurmdbd = versioned_cluster.slurmdbd
    assert slurmdbd is not None
    tables = slurmdbd.db.sql(f"SHOW TABLES FROM {slurmdbd.database} LIKE '%job_table'")
    assert tables.split() == ["k8saitest_job_table"]
    assert os.stat(versioned_cluster.root / "etc" / "slurmdbd.conf").st_mode & 0o077 == 0


def _sacct(cluster: LocalSlurmCluster, job_id: str, fields: str) -> list[str]:
    out = cluster.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", fields]).stdout
    return [line for line in out.splitlines() if line.strip()]
