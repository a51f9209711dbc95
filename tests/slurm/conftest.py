"""A real Slurm cluster (3 nodes, two with 2 fake GPUs) for the whole test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from k8s_ai_orchestrator.backends.slurm import SlurmBackend, SlurmConfig
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster, missing_slurm_programs
from tests.requirements import INSTALL_DEPS, require


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[LocalSlurmCluster]:
    missing = missing_slurm_programs()
    require(f"Slurm ({', '.join(missing)})" if missing else "Slurm", not missing, INSTALL_DEPS)
    root = "root (the local Slurm cluster runs its daemons as root)"
    require(root, os.geteuid() == 0, "run the Slurm tests as root")
    with LocalSlurmCluster() as cluster:
        yield cluster


@pytest.fixture
def cluster(slurm_cluster: LocalSlurmCluster) -> Iterator[LocalSlurmCluster]:
    """The session cluster, checked idle before each test and cleared of jobs after it."""
    slurm_cluster.wait_until_idle(60)
    yield slurm_cluster
    slurm_cluster.run(["scancel", "--full", "--user=root"])
    for name in (node.name for node in slurm_cluster.nodes):
        if slurm_cluster.node_states().get(name, "").startswith(("down", "drain")):
            slurm_cluster.set_node_state(name, "resume")


@pytest.fixture
def cli_config(cluster: LocalSlurmCluster) -> SlurmConfig:
    return SlurmConfig(
        transport="cli", workdir=str(cluster.workdir), slurm_conf=str(cluster.conf_path)
    )


@pytest.fixture
def backend(cli_config: SlurmConfig) -> SlurmBackend:
    return SlurmBackend(cli_config, rss_sample_interval_s=0)
