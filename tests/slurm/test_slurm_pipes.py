"""AICompute on the real local Slurm, each version over each transport (conftest.py's
`executor_slurm`): messages through a file in the shared workdir."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance

from k8s_ai_orchestrator import AICompute
from k8s_ai_orchestrator.backends.slurm.states import expand_hostlist
from k8s_ai_orchestrator.checkpoint.keys import CheckpointKey
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster
from tests.pipes.pipes_support import (
    attempt_rows,
    check_evaluation,
    log_messages,
    materialization_metadata,
    materialize_tiles,
)

pytestmark = [pytest.mark.slurm, pytest.mark.slurm_pairs, pytest.mark.timeout(240)]


@pytest.fixture
def cluster(versioned_cluster: LocalSlurmCluster) -> LocalSlurmCluster:
    """Every program here runs on each Slurm version (conftest.py's `versioned_cluster`)."""
    return versioned_cluster


ROOT = Path(__file__).parents[2]
SIZE = {"cpu": 1, "memory": "256Mi", "backend": "slurm"}


@pytest.fixture
def ai_config(executor_slurm: dict[str, Any]) -> dict[str, Any]:
    """AICompute's config for the cluster over each transport in turn."""
    return {"slurm": executor_slurm, "poll_interval_s": 0.2}


def wait_for(predicate: Any, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_two_node_program_reports_through_a_file_in_the_shared_workdir(
    ai_config: dict[str, Any], cluster: LocalSlurmCluster, tmp_path: Path
) -> None:
    ai = AICompute(**ai_config)

    result = materialize_tiles(ai, {**SIZE, "nodes": 2}, {"TILES": "2"}, f"file://{tmp_path}")

    assert result.success, [e.message for e in result.all_events if e.is_failure]
    metadata = materialization_metadata(result)
    assert (metadata["tiles"], metadata["backend"]) == (2, "slurm")
    assert len(metadata["nodes_used"].split(", ")) == 2
    assert check_evaluation(result) == ("tiles_complete", True)
    assert list((cluster.workdir / "pipes").glob("*.jsonl")) == []  # removed with the session


def test_an_undersized_program_killed_by_slurm_succeeds_after_memory_escalation(
    ai_config: dict[str, Any], cluster: LocalSlurmCluster, tmp_path: Path, instance: DagsterInstance
) -> None:
    result = materialize_tiles(
        AICompute(**ai_config),
        {**SIZE, "memory": "64Mi"},
        {"NEED_MIB": "150"},
        f"file://{tmp_path}",
        instance=instance,
    )

    assert result.success, [e.message for e in result.all_events if e.is_failure]
    metadata = materialization_metadata(result)
    assert metadata["memory_tried"] == "64Mi → 128Mi → 256Mi" and metadata["attempt"] == 2
    rows = attempt_rows(metadata)
    assert [r["outcome"] for r in rows] == ["OOMKilled", "OOMKilled", "Succeeded"]
    first = cluster.run(["scontrol", "show", "job", "-o", rows[0]["job"]]).stdout
    killed = "OUT_OF_MEMORY" if cluster.cgroup_memory else "FAILED"  # kernel, or slurmstepd
    assert f"JobState={killed}" in first and "mem=64M" in first
    assert (
        "Relaunching: step 'tiles-pipes' was OOMKilled with 64Mi; relaunching with "
        "64Mi → 128Mi (attempt 2/4)" in log_messages(instance, result.run_id)
    )


def test_a_program_on_a_lost_node_is_relaunched_and_resumes_from_its_checkpoint(
    ai_config: dict[str, Any], cluster: LocalSlurmCluster, tmp_path: Path, instance: DagsterInstance
) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    folder = ckpt / CheckpointKey(("tiles",)).relative_path()
    env = {"TILES": "8", "TILE_S": "0.5", "PIPES_TEST_OUT": str(out)}

    def lose_the_node_after_two_tiles() -> None:
        wait_for(lambda: (out / "job-0").exists() and _tiles_done(folder) >= 2)
        job_id = (out / "job-0").read_text()
        nodes = cluster.run(["squeue", "-h", "-j", job_id, "-o", "%N"]).stdout.strip()
        cluster.set_node_state(expand_hostlist(nodes)[-1], "down", reason="lost in test")

    loser = threading.Thread(target=lose_the_node_after_two_tiles)
    loser.start()
    result = materialize_tiles(
        AICompute(**ai_config),
        SIZE,
        env,
        f"file://{ckpt}",
        checkpointed=True,
        instance=instance,
    )
    loser.join()

    assert result.success, [e.message for e in result.all_events if e.is_failure]
    metadata = materialization_metadata(result)
    assert metadata["attempt"] == 1 and metadata["resumed_at"] >= 2 and metadata["tiles"] == 8
    logs = log_messages(instance, result.run_id)
    assert any("was Lost; relaunching at the same size" in m for m in logs), logs


def test_terminating_the_run_leaves_no_slurm_job(
    ai_config: dict[str, Any], cluster: LocalSlurmCluster, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = {"TILES": "100", "TILE_S": "1", "PIPES_TEST_OUT": str(out)}
    config = {**ai_config, "backend": "slurm"}
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.pipes.terminate_run", json.dumps(config), json.dumps(env)],
        cwd=ROOT,
    )
    wait_for(lambda: (out / "job-0").exists())
    job_id = (out / "job-0").read_text()

    run.send_signal(signal.SIGINT)

    assert run.wait(timeout=60) != 0
    wait_for(lambda: not cluster.run(["squeue", "-h", "-j", job_id]).stdout.strip(), 30)


def test_a_program_larger_than_the_partition_is_refused_before_sbatch(
    ai_config: dict[str, Any], cluster: LocalSlurmCluster, tmp_path: Path
) -> None:
    before = _known_jobs(cluster)

    result = materialize_tiles(
        AICompute(**ai_config), {**SIZE, "cpu": 64}, {}, f"file://{tmp_path}"
    )

    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.cause.message  # type: ignore[union-attr]
    assert "step 'tiles-pipes'" in message and "64" in message
    assert _known_jobs(cluster) == before


def _known_jobs(cluster: LocalSlurmCluster) -> set[str]:
    """Ids of the jobs slurmctld knows, finished ones included."""
    lines = cluster.run(["scontrol", "-o", "show", "jobs"]).stdout.splitlines()
    return {line.split()[0] for line in lines if line.startswith("JobId=")}


def _tiles_done(folder: Path) -> int:
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return 0
    return int(manifest["commits"][0]["progress"])
