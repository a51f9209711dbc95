"""Multi-node steps on the kubernetes backend: one Indexed Job, one pod per node, the same
rank environment as on Slurm, and the gang failing, relaunching and stopping as one.

Runs on every target of `gang_support.GANG_TARGETS`: the emulator and a real control plane.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gang_support import (
    GangTarget,
    gang_step,
    gpu_pod,
    job_pods,
    make_backend,
    run_gang_code,
    wait_status,
)
from k8s_support import NAMESPACE

from k8s_ai_orchestrator.backends.base import FailureReason, JobHandle, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend
from k8s_ai_orchestrator.backends.kubernetes.gangs import pod_index
from tests.plane_fixtures import KUBE_TARGETS


@pytest.fixture
def backend(gang_target: GangTarget) -> Iterator[KubernetesBackend]:
    built = make_backend(gang_target)
    yield built
    built.close()


@pytest.mark.slow
def test_gang_runs_one_pod_per_node_and_every_rank_sees_the_slurm_environment(
    gang_target: GangTarget, backend: KubernetesBackend, tmp_path: Path
) -> None:
    request = gang_step(
        run_gang_code("record_rank", str(tmp_path)),
        run_id="ranks",
        tasks_per_node=2,
        gpus_per_node=2,
    )
    handle = backend.submit(request)
    status = wait_status(gang_target, backend, handle, lambda s: s.is_terminal)

    assert status.state == StepState.SUCCEEDED, (status, backend.logs(handle))
    pods = job_pods(gang_target, handle)
    assert len({p["spec"]["nodeName"] for p in pods}) == 2
    for pod in pods:
        assert pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "2"
        assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"
    ranks = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank-*.json"))]
    assert [r["RANK"] for r in ranks] == ["0", "1", "2", "3"]
    assert {r["WORLD_SIZE"] for r in ranks} == {"4"}
    assert [(r["NODE_RANK"], r["LOCAL_RANK"]) for r in ranks] == [
        ("0", "0"),
        ("0", "1"),
        ("1", "0"),
        ("1", "1"),
    ]
    assert len({r["MASTER_ADDR"] for r in ranks}) == 1
    assert len({r["MASTER_PORT"] for r in ranks}) == 1
    assert {r["NODE"] for r in ranks[:2]} != {r["NODE"] for r in ranks[2:]}
    assert 'RESULT {"RANK": "0"' in backend.logs(handle)


@pytest.mark.slow
def test_a_failing_rank_fails_the_gang_with_its_traceback_and_stops_the_other_ranks(
    gang_target: GangTarget, backend: KubernetesBackend, tmp_path: Path
) -> None:
    request = gang_step(
        run_gang_code("fail_on_rank", 3, str(tmp_path), 900), run_id="fails", tasks_per_node=2
    )
    started = time.monotonic()
    handle = backend.submit(request)
    status = wait_status(gang_target, backend, handle, lambda s: s.is_terminal)

    assert status.state == StepState.FAILED and status.reason == FailureReason.ERROR
    log = backend.logs(handle)
    assert "GangError: gang rank 3 of 4 failed on node-" in log
    assert "ValueError: rank 3 broke" in log and "Traceback" in log
    gang_target.wait_for(lambda: not running_pods(gang_target, handle), timeout=120)
    assert time.monotonic() - started < 600  # the ranks sleeping 900 s were stopped


def running_pods(gang_target: GangTarget, handle: JobHandle) -> list[Any]:
    return [p for p in job_pods(gang_target, handle) if p["status"].get("phase") == "Running"]


def test_a_preempted_worker_pod_fails_the_whole_gang_as_preempted(
    gang_target: GangTarget, backend: KubernetesBackend
) -> None:
    handle = backend.submit(
        gang_step(run_gang_code("sleep_rank", 600), run_id="preempted", gpus_per_node=4)
    )
    wait_status(gang_target, backend, handle, lambda s: s.state == StepState.RUNNING)
    worker = next(p for p in job_pods(gang_target, handle) if pod_index(p) == 1)
    node = worker["spec"]["nodeName"]
    gang_target.core("team-b").create_namespaced_pod(NAMESPACE, gpu_pod("urgent-1", node, "urgent"))

    status = wait_status(gang_target, backend, handle, lambda s: s.is_terminal)

    assert status.reason == FailureReason.PREEMPTED, status
    assert status.message.startswith(f"gang pod 1 of 2 ({worker['metadata']['name']} on {node})")
    assert "PreemptionByScheduler" in status.message
    # urgent-1 is team-b's: the gang's tenant cannot name it, and says so
    assert f"; preempted by a higher-priority pod on {node} that this tenant cannot name" in (
        status.message
    )
    gang_target.wait_for(lambda: not job_pods(gang_target, handle), timeout=120)
    gang_target.core("team-b").delete_namespaced_pod("urgent-1", NAMESPACE, grace_period_seconds=0)


@pytest.mark.parametrize("gang_target", [KUBE_TARGETS[1]], indirect=True)
def test_a_worker_pod_no_kubelet_will_end_stops_the_whole_gang_for_a_relaunch(
    gang_target: GangTarget, backend: KubernetesBackend
) -> None:
    """Rank 1's host pod preempted and gone at once: the tenant pod is left Running, deleted,
    held by the Job's finalizer; the Job's failure policy never sees it fail, so the Job would
    never stop rank 0. The backend stops the gang, and nothing is left. The step reads
    Preempted whether or not the pod's DisruptionTarget reached the tenant before its host pod
    went: the scheduler's `Preempted` event, which the syncer copies, says so too."""
    assert gang_target.vanish is not None
    handle = backend.submit(gang_step(run_gang_code("sleep_rank", 600), run_id="vanished"))
    wait_status(gang_target, backend, handle, lambda s: s.state == StepState.RUNNING)
    worker = next(p for p in job_pods(gang_target, handle) if pod_index(p) == 1)

    gang_target.vanish("team-a", worker["metadata"]["name"])
    status = wait_status(gang_target, backend, handle, lambda s: s.is_terminal)

    assert status.reason == FailureReason.PREEMPTED, status
    assert "PreemptionByScheduler" in status.message
    assert status.message.startswith(f"gang pod 1 of 2 ({worker['metadata']['name']}")
    gang_target.wait_for(lambda: not job_pods(gang_target, handle), timeout=120)
    assert not [j for j in gang_target.jobs("team-a") if j["metadata"]["name"] == handle.job_id]


def test_cancelling_a_gang_leaves_no_pods(
    gang_target: GangTarget, backend: KubernetesBackend
) -> None:
    handle = backend.submit(gang_step(run_gang_code("sleep_rank", 600), run_id="cancelled"))
    wait_status(gang_target, backend, handle, lambda s: s.state == StepState.RUNNING)

    backend.cancel(handle)

    gang_target.wait_for(lambda: not job_pods(gang_target, handle), timeout=120)
    assert backend.status(handle).reason == FailureReason.CANCELLED
