"""AICompute on Kubernetes tenants: the program runs as a Job, its messages come from the pod log.

Every test runs on each target of `k8s_cluster` (see conftest.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance
from kubernetes.utils import parse_quantity

from k8s_ai_orchestrator import AICompute
from k8s_ai_orchestrator.checkpoint.keys import CheckpointKey
from tests.pipes.conftest import PipesCluster
from tests.pipes.pipes_support import (
    attempt_rows,
    check_evaluation,
    log_messages,
    materialization_metadata,
    materialize_tiles,
)

# emulator or controlplane: each target parameter carries its marker (tests/plane_fixtures.py)
pytestmark = pytest.mark.timeout(180)
ROOT = Path(__file__).parents[2]
SIZE = {"cpu": 0.5, "memory": "256Mi", "tenant": "team-a"}


def k8s_ai(cluster: PipesCluster, **config: Any) -> AICompute:
    return AICompute(
        backend="kubernetes", kubernetes=cluster.kubernetes, poll_interval_s=0.05, **config
    )


def test_a_job_reports_materialization_and_check_through_its_pod_log(
    k8s_cluster: PipesCluster, tmp_path: Path
) -> None:
    result = materialize_tiles(k8s_ai(k8s_cluster), SIZE, {"TILES": "2"}, f"file://{tmp_path}")

    assert result.success
    metadata = materialization_metadata(result)
    assert (metadata["tiles"], metadata["backend"], metadata["tenant"]) == (
        2,
        "kubernetes",
        "team-a",
    )
    assert check_evaluation(result) == ("tiles_complete", True)
    (row,) = attempt_rows(metadata)
    assert row["job"].startswith("k8s-ai-") and row["outcome"] == "Succeeded"


def test_a_priced_program_is_charged_and_its_argv_is_left_as_given(
    k8s_cluster: PipesCluster, tmp_path: Path
) -> None:
    """With `prices`, an `AICompute` program's materialization carries its cost; its argv is
    the user's own (`raw_command`), so it does not start through the usage reporter and its
    used figures stay unknown without `nodes/proxy` (docs/cost.md, Limits)."""
    ai = k8s_ai(k8s_cluster, prices={"cpu_hour": 0.04, "memory_gib_hour": 0.005})
    result = materialize_tiles(ai, SIZE, {"TILES": "2"}, f"file://{tmp_path}")

    assert result.success
    metadata = materialization_metadata(result)
    assert metadata["tiles"] == 2 and check_evaluation(result) == ("tiles_complete", True)
    assert metadata["cost"] >= 0 and metadata["currency"] == "USD", metadata  # 0.00 here
    assert "peak_memory_bytes" not in metadata and "waste_unused_memory_cost" not in metadata


def test_an_oomkilled_job_is_relaunched_with_more_memory_and_succeeds(
    k8s_cluster: PipesCluster, tmp_path: Path, instance: DagsterInstance
) -> None:
    size = {**SIZE, "memory": "64Mi"}
    result = materialize_tiles(
        k8s_ai(k8s_cluster), size, {"NEED_MIB": "150"}, f"file://{tmp_path}", instance=instance
    )

    assert result.success
    metadata = materialization_metadata(result)
    assert metadata["memory_tried"] == "64Mi → 128Mi → 256Mi" and metadata["attempt"] == 2
    assert [r["outcome"] for r in attempt_rows(metadata)] == ["OOMKilled", "OOMKilled", "Succeeded"]
    logs = log_messages(instance, result.run_id)
    launched = "Launching program 'tiles-pipes' on kubernetes tenant 'team-a'"
    assert any(m.startswith(launched) for m in logs)


def test_a_program_that_does_not_report_its_memory_is_grown_in_place_from_node_stats(
    k8s_cluster: PipesCluster, tmp_path: Path, instance: DagsterInstance
) -> None:
    """A Pipes program (`python tiles.py`: no memory reports) holding 360Mi of 512Mi is read
    from its node's `/stats/summary` through the tenant's `nodes/<node>/proxy` and grown in
    place past `grow_at`: on a real vCluster tenant through the syncer's front proxy too."""
    ai = k8s_ai(k8s_cluster, oom_escalation={"grow_at": 0.6})
    size = {**SIZE, "memory": "512Mi"}
    env = {"HOLD_MIB": "360", "HOLD_S": "25", "TILES": "1"}
    result = materialize_tiles(ai, size, env, f"file://{tmp_path}", instance=instance)

    assert result.success
    logs = log_messages(instance, result.run_id)
    # grown by what its climb to 360Mi needs (at least 1.25 ×, at most the factor's 1Gi)
    grown = [m for m in logs if m.startswith("Grew step 'tiles-pipes' in place: memory 512Mi → ")]
    assert grown, [m for m in logs if "emory" in m]
    to = parse_quantity(grown[0].split(" → ", 1)[1].split(" ", 1)[0])
    assert 640 * 1024**2 <= to <= 1024**3, grown
    (row,) = attempt_rows(materialization_metadata(result))
    assert row["outcome"] == "Succeeded"  # one attempt: grown, not relaunched


def test_a_preempted_job_is_relaunched_and_resumes_from_its_checkpoint(
    k8s_cluster: PipesCluster, tmp_path: Path
) -> None:
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    out.mkdir()
    folder = ckpt / CheckpointKey(("tiles",)).relative_path()
    env = {"TILES": "8", "TILE_S": "0.3", "PIPES_TEST_OUT": str(out)}

    def preempt_after_two_tiles() -> None:
        k8s_cluster.wait_for(lambda: _tiles_done(folder) >= 2, timeout=60)
        (pod,) = [p for p in k8s_cluster.pods("team-a") if _running_first_attempt(p)]
        k8s_cluster.preempt("team-a", pod["metadata"]["name"])

    preempter = threading.Thread(target=preempt_after_two_tiles)
    preempter.start()
    result = materialize_tiles(
        k8s_ai(k8s_cluster),
        {**SIZE, "preemptible": True},
        env,
        f"file://{ckpt}",
        checkpointed=True,
    )
    preempter.join()

    assert result.success
    metadata = materialization_metadata(result)
    assert metadata["attempt"] == 1 and metadata["resumed_at"] >= 2 and metadata["tiles"] == 8
    assert metadata["reasons"] == "Preempted"


def test_terminating_the_run_leaves_no_job(k8s_cluster: PipesCluster, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = {"TILES": "100", "TILE_S": "1", "PIPES_TEST_OUT": str(out)}
    config = {
        "backend": "kubernetes",
        "kubernetes": k8s_cluster.kubernetes,
        "default_tenant": "team-a",
        "poll_interval_s": 0.05,
    }
    before = _job_names(k8s_cluster)
    run = subprocess.Popen(
        [sys.executable, "-m", "tests.pipes.terminate_run", json.dumps(config), json.dumps(env)],
        cwd=ROOT,
    )
    k8s_cluster.wait_for(lambda: (out / "pid-0").exists(), timeout=60)
    assert _job_names(k8s_cluster) - before  # the program's Job

    run.send_signal(signal.SIGINT)

    assert run.wait(timeout=60) != 0
    k8s_cluster.wait_for(lambda: not _job_names(k8s_cluster) - before)


def test_a_program_larger_than_any_node_is_refused_before_a_job_is_created(
    k8s_cluster: PipesCluster, tmp_path: Path
) -> None:
    before = len(k8s_cluster.jobs("team-b"))
    size = {"cpu": 128, "memory": "1Gi", "tenant": "team-b"}  # no node of either target has 128

    result = materialize_tiles(k8s_ai(k8s_cluster), size, {}, f"file://{tmp_path}")

    assert not result.success
    (failure,) = [e for e in result.all_events if e.is_step_failure]
    message = failure.step_failure_data.error.cause.message  # type: ignore[union-attr]
    assert "step 'tiles-pipes'" in message and "can never run in tenant 'team-b'" in message
    assert len(k8s_cluster.jobs("team-b")) == before


def _running_first_attempt(pod: dict[str, Any]) -> bool:
    labels = pod["metadata"].get("labels", {})
    phase = pod.get("status", {}).get("phase")
    return labels.get("k8s-ai/attempt") == "0" and phase == "Running" and _is_tiles(pod)


def _job_names(cluster: PipesCluster) -> set[str]:
    return {job["metadata"]["name"] for job in cluster.jobs("team-a")}


def _is_tiles(job: dict[str, Any]) -> bool:
    return job["metadata"].get("labels", {}).get("k8s-ai/step") == "tiles-pipes"


def _tiles_done(folder: Path) -> int:
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return 0
    return int(manifest["commits"][0]["progress"])
