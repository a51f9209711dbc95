"""End to end, on each Slurm version over each transport (conftest.py's `executor_slurm`):
`ai_executor` with the local default backend sends a 2-node gang asset to Slurm."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository

from k8s_ai_orchestrator.backends.slurm.states import expand_hostlist
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster
from tests.slurm.gang_jobs import defs

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_pairs, pytest.mark.timeout(240)]

ROOT = Path(__file__).parents[2]
JOBS = ReconstructableRepository.for_module(
    "tests.slurm.gang_jobs", "defs", working_directory=str(ROOT)
)


@pytest.fixture
def cluster(versioned_cluster: LocalSlurmCluster) -> LocalSlurmCluster:
    """Every run here goes to each Slurm version (conftest.py's `versioned_cluster`)."""
    return versioned_cluster


def test_two_node_gang_asset_is_materialized_on_slurm_by_ai_executor(
    executor_slurm: dict[str, Any], instance: DagsterInstance, test_out: Path
) -> None:
    executor = {"backend": "local", "slurm": executor_slurm}

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


def test_a_preemptible_gang_step_requeued_on_usr2_resumes_and_the_run_succeeds(
    cluster: LocalSlurmCluster,
    executor_slurm: dict[str, Any],
    instance: DagsterInstance,
    test_out: Path,
) -> None:
    slurm = {**executor_slurm, "grace_period_s": 4}
    preempt = threading.Thread(target=send_usr2_once_started, args=(cluster, test_out))
    preempt.start()

    result = execute_job(
        JOBS.get_reconstructable_job("train_resumable"),
        instance=instance,
        run_config={"execution": {"config": {"backend": "local", "slurm": slurm}}},
        raise_on_error=False,
    )
    preempt.join(timeout=60)

    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert (test_out / "checkpoint").read_text() == "saved"
    assert defs.load_asset_value("resumable_model", instance=instance) == (
        "resumed from checkpoint"
    )
    notes = [e.message or "" for e in result.all_events if e.is_engine_event]
    assert any("requeued 1 time(s)" in note for note in notes), notes


def send_usr2_once_started(cluster: LocalSlurmCluster, out: Path) -> None:
    """What Slurm does grace_period_s before a time limit: USR2 to the batch script."""
    deadline = time.monotonic() + 120
    while not (out / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    job_id = (out / "started").read_text()
    cluster.run(["scancel", "--batch", "--signal=USR2", job_id])


def test_a_gang_step_that_loses_a_node_is_relaunched_and_the_run_succeeds(
    cluster: LocalSlurmCluster,
    executor_slurm: dict[str, Any],
    instance: DagsterInstance,
    test_out: Path,
) -> None:
    slurm = executor_slurm
    fail_node = threading.Thread(target=take_a_node_down_once_started, args=(cluster, test_out))
    fail_node.start()

    result = execute_job(
        JOBS.get_reconstructable_job("train_relaunched"),
        instance=instance,
        run_config={"execution": {"config": {"backend": "local", "slurm": slurm}}},
        raise_on_error=False,
    )
    fail_node.join(timeout=60)

    assert result.success, [e.message for e in result.all_events if e.is_failure]
    value = defs.load_asset_value("relaunched_model", instance=instance)
    assert value.startswith("attempt 1 on ")
    notes = [e.message or "" for e in result.all_events if e.is_engine_event]
    assert any("was Lost; relaunching" in note for note in notes), notes


def take_a_node_down_once_started(cluster: LocalSlurmCluster, out: Path) -> None:
    deadline = time.monotonic() + 120
    while not (out / "started").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    job_id = (out / "started").read_text()
    nodes = cluster.run(["squeue", "-h", "-j", job_id, "-o", "%N"]).stdout.strip()
    cluster.set_node_state(expand_hostlist(nodes)[-1], "down", reason="lost in test")


def _text_under(folder: Path) -> str:
    return "\n".join(
        path.read_bytes().decode("utf-8", "replace") for path in folder.rglob("*") if path.is_file()
    )


def test_a_step_slurm_kills_over_its_memory_is_relaunched_with_double_memory(
    cluster: LocalSlurmCluster, executor_slurm: dict[str, Any], instance: DagsterInstance
) -> None:
    slurm = executor_slurm

    result = execute_job(
        JOBS.get_reconstructable_job("train_hungry"),
        instance=instance,
        run_config={"execution": {"config": {"backend": "slurm", "slurm": slurm}}},
        raise_on_error=False,
    )

    assert result.success, [e.message for e in result.all_events if e.is_failure]
    assert defs.load_asset_value("hungry_model", instance=instance) == "attempt 1 held 200Mi"
    notes = [e.message or "" for e in result.all_events if e.is_engine_event]
    relaunch = next(note for note in notes if note.startswith("Relaunching:"))
    assert "was OOMKilled with 256Mi; relaunching with 256Mi → 512Mi" in relaunch, notes
    if cluster.cgroup_memory:  # 24.11: the kernel's OOM killer, slurmstepd's line with it
        assert "ended OUT_OF_MEMORY" in relaunch and "1 oom_kill event in StepId=" in relaunch
    else:
        assert ".batch exceeded memory limit (" in relaunch and "> 268435456)" in relaunch


def test_a_failing_gang_run_over_slurmrestd_stores_its_token_nowhere(
    cluster: LocalSlurmCluster,
    instance: DagsterInstance,
    dagster_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    token = cluster.jwt_token()
    monkeypatch.setenv("K8S_AI_TEST_SLURM_JWT", token)
    slurm = {
        "transport": "rest",
        "rest_url": cluster.rest_url,
        "rest_user": "root",
        "rest_token": {"env": "K8S_AI_TEST_SLURM_JWT"},
        "workdir": str(cluster.workdir),
        "slurm_conf": str(cluster.conf_path),
    }

    result = execute_job(
        JOBS.get_reconstructable_job("train_failing"),
        instance=instance,
        run_config={"execution": {"config": {"backend": "local", "slurm": slurm}}},
        raise_on_error=False,
    )

    assert not result.success
    failures = [e.message or "" for e in result.all_events if e.is_step_failure]
    assert failures, "the gang step failed on Slurm"
    run = instance.get_run_by_id(result.run_id)
    assert run is not None and token not in json.dumps(run.run_config)
    events = [record.dagster_event for record in instance.all_logs(result.run_id)]
    assert all(token not in repr(event) for event in events)
    assert token not in _text_under(dagster_home), "run storage, event log or compute logs"
    assert token not in _text_under(Path(cluster.workdir)), "sbatch scripts or job output"
