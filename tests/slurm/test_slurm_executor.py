"""End to end: `ai_executor` with the local default backend sends a 2-node gang asset to Slurm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository

from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster
from tests.slurm.gang_jobs import defs

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(180)]

ROOT = Path(__file__).parents[2]
JOBS = ReconstructableRepository.for_module(
    "tests.slurm.gang_jobs", "defs", working_directory=str(ROOT)
)


def test_two_node_gang_asset_is_materialized_on_slurm_by_ai_executor(
    cluster: LocalSlurmCluster, instance: DagsterInstance, test_out: Path
) -> None:
    slurm = {"workdir": str(cluster.workdir), "slurm_conf": str(cluster.conf_path)}
    executor = {"backend": "local", "slurm": slurm}

    result = execute_job(
        JOBS.get_reconstructable_job("train_gang"),
        instance=instance,
        run_config={"execution": {"config": executor}},
        raise_on_error=False,
    )

    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert defs.load_asset_value("gang_model", instance=instance)["RANK"] == "0"
    ranks = [json.loads((test_out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert {r["node"] for r in ranks} == {"n1", "n2"}
    assert [r["WORLD_SIZE"] for r in ranks] == ["2", "2"]
    launches = [e.message or "" for e in result.all_events if e.is_engine_event]
    assert any("Launching step 'gang_model' on slurm" in m for m in launches), launches
