"""A gang's state from its pods, the guard's view of room, and where gangs are routed:
pure logic, no cluster."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest
from kubernetes.client import (
    V1Container,
    V1Node,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
)

from k8s_ai_orchestrator.backends.base import FailureReason, StepState
from k8s_ai_orchestrator.backends.kubernetes.capacity import gang_room
from k8s_ai_orchestrator.backends.kubernetes.gangs import (
    INDEX_KEY,
    gang_status,
    lost_pods,
    pending_pod,
    preempted_pods,
)
from k8s_ai_orchestrator.backends.kubernetes.status import SETTLE_S
from k8s_ai_orchestrator.errors import ConfigError
from k8s_ai_orchestrator.launch.settings import ExecutorSettings
from k8s_ai_orchestrator.spec import resolve_spec

PREEMPTED = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "PreemptionByScheduler",
    "message": "default-scheduler: preempting to accommodate a higher priority pod",
}


def pod(index: int, phase: str, node: str | None = "node-a", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": f"train-{index}-x", "annotations": {INDEX_KEY: str(index)}},
        "spec": {"nodeName": node},
        "status": {"phase": phase, **status},
    }


def test_a_gang_runs_only_when_every_pod_runs() -> None:
    assert gang_status([pod(0, "Running"), pod(1, "Pending", None)], [], 2, now=0.0).state == (
        StepState.PENDING
    )
    running = gang_status([pod(0, "Running"), pod(1, "Running", "node-b")], [], 2, now=0.0)
    assert (running.state, running.node) == (StepState.RUNNING, "node-a")


def test_a_pending_gang_is_explained_by_the_pod_carrying_the_pod_group_reason() -> None:
    """kube-scheduler writes the group's reason on one pod of a gang and its per-pod filter
    message on the others; the group's reason is the one that says what the gang waits for."""

    def unscheduled(index: int, message: str) -> dict[str, Any]:
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        return pod(index, "Pending", None, conditions=[{**condition, "message": message}])

    filtered = unscheduled(0, "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.")
    group = unscheduled(1, "pod group is unschedulable, minCount (2) cannot be satisfied")
    assert pending_pod([filtered, group]) is group
    assert pending_pod([filtered, pod(1, "Pending", None)]) is filtered
    assert pending_pod([pod(0, "Running"), pod(1, "Pending", None)]) == pod(1, "Pending", None)
    assert pending_pod([pod(0, "Running")]) is None


def test_a_preempted_pod_stands_for_the_gang_once_every_pod_has_stopped() -> None:
    victim = pod(1, "Running", "node-b", conditions=[PREEMPTED])
    stopping = gang_status([pod(0, "Running"), victim], [], 2, now=0.0)
    assert (stopping.state, stopping.reason) == (StepState.RUNNING, FailureReason.PREEMPTED)

    gone = pod(1, "Failed", "node-b", conditions=[PREEMPTED])
    ended = gang_status([pod(0, "Failed")], [gone], 2, now=0.0)

    assert (ended.state, ended.reason) == (StepState.FAILED, FailureReason.PREEMPTED)
    assert ended.message.startswith("gang pod 1 of 2 (train-1-x on node-b): PreemptionByScheduler")


def test_a_rank_deleted_before_its_end_reached_the_tenant_reads_preempted_by_its_event() -> None:
    """Under vCluster a preempted host pod can vanish before its DisruptionTarget is copied:
    the tenant pod is deleted as it last was, Running. The scheduler's `Preempted` event,
    which the syncer copies, still says what happened; without one the rank reads Lost."""
    vanished = pod(1, "Running", "node-b")
    said = {"train-1-x": "Preempted by pod 6f1c on node node-b"}
    assert [p["metadata"]["name"] for p in lost_pods([pod(0, "Running")], [vanished], now=0.0)] == [
        "train-1-x"
    ]

    stopping = gang_status([pod(0, "Running")], [vanished], 2, now=0.0, preempted=said)
    ended = gang_status([pod(0, "Failed")], [vanished], 2, now=0.0, preempted=said)
    unknown = gang_status([pod(0, "Failed")], [vanished], 2, now=0.0)

    assert (stopping.state, stopping.reason) == (StepState.RUNNING, FailureReason.PREEMPTED)
    assert (ended.state, ended.reason) == (StepState.FAILED, FailureReason.PREEMPTED)
    assert ended.message.startswith("gang pod 1 of 2 (train-1-x on node-b): PreemptionByScheduler")
    assert "Preempted by pod 6f1c on node node-b" in ended.message
    assert unknown.reason == FailureReason.LOST
    assert preempted_pods([pod(0, "Failed")], [vanished], said) == [vanished]
    assert preempted_pods([pod(0, "Failed")], [vanished]) == []


def test_the_leader_pod_decides_success() -> None:
    status = gang_status([pod(0, "Succeeded"), pod(1, "Running", "node-b")], [], 2, now=0.0)
    assert status.state == StepState.SUCCEEDED


def test_a_failed_worker_fails_the_gang() -> None:
    failed = pod(
        1,
        "Failed",
        "node-b",
        containerStatuses=[{"state": {"terminated": {"exitCode": 3, "reason": "Error"}}}],
    )
    status = gang_status([pod(0, "Running"), failed], [], 2, now=0.0)
    assert (status.state, status.reason) == (StepState.FAILED, FailureReason.ERROR)
    assert status.message.startswith("gang pod 1 of 2 (train-1-x on node-b): exit code 3")


def _killed_worker(reason: str) -> dict[str, Any]:
    """Rank 1 SIGKILLed at 10:00:00 with a 1Gi limit; `reason` as the kubelet reads it."""
    worker = pod(
        1,
        "Failed",
        "node-b",
        containerStatuses=[
            {
                "state": {
                    "terminated": {
                        "exitCode": 137,
                        "reason": reason,
                        "finishedAt": "2026-12-03T10:00:00Z",
                    }
                }
            }
        ],
    )
    worker["spec"]["containers"] = [{"resources": {"limits": {"memory": "1Gi"}}}]
    return worker


def test_a_rank_killed_before_its_oom_is_told_holds_the_gang_until_it_settles() -> None:
    """A real kubelet can read `Error`, exit 137, before `OOMKilled`: a gang rank that reads so
    keeps the gang Running for `SETTLE_S`, so a late `OOMKilled` relaunches it with more
    memory; once settled, it fails the gang as an Error."""
    killed = datetime.fromisoformat("2026-12-03T10:00:00Z").timestamp()
    early = gang_status([pod(0, "Running"), _killed_worker("Error")], [], 2, now=killed + 2)
    assert early.state == StepState.RUNNING
    told = gang_status([pod(0, "Running"), _killed_worker("OOMKilled")], [], 2, now=killed + 2)
    assert (told.state, told.reason) == (StepState.FAILED, FailureReason.OOM_KILLED)
    late = killed + SETTLE_S
    settled = gang_status([pod(0, "Running"), _killed_worker("Error")], [], 2, now=late)
    assert (settled.state, settled.reason) == (StepState.FAILED, FailureReason.ERROR)


def node(name: str, gpus: int) -> V1Node:
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels={}),
        spec=V1NodeSpec(),
        status=V1NodeStatus(
            allocatable={"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": str(gpus)}
        ),
    )


def gpu_holder(on: str, priority_class: str) -> V1Pod:
    resources = V1ResourceRequirements(requests={"nvidia.com/gpu": "4"})
    return V1Pod(
        spec=V1PodSpec(
            node_name=on,
            priority_class_name=priority_class,
            containers=[V1Container(name="c", resources=resources)],
        ),
        status=V1PodStatus(phase="Running"),
    )


NEEDS = {"cpu": Decimal(1), "memory": Decimal(2**30), "gpu": Decimal(4)}


def test_room_counts_preemptible_pods_as_free_but_not_standard_ones() -> None:
    nodes = [node("node-a", 4), node("node-b", 4)]
    standard = gang_room(
        nodes,
        [gpu_holder("node-b", "k8s-ai-standard")],
        NEEDS,
        2,
        node_labels={},
        reclaimable_class="k8s-ai-preemptible",
    )
    assert (standard.enough, standard.nodes) == (False, ("node-a",))
    preemptible = gang_room(
        nodes,
        [gpu_holder("node-b", "k8s-ai-preemptible")],
        NEEDS,
        2,
        node_labels={},
        reclaimable_class="k8s-ai-preemptible",
    )
    assert preemptible.enough


def test_gang_backend_sends_multi_node_steps_to_a_tenant_even_with_slurm_configured() -> None:
    settings = ExecutorSettings.from_config(
        {"backend": "local", "slurm": {}, "kubernetes": {}, "gang_backend": "kubernetes"}
    )
    assert settings.backend_for(resolve_spec({"nodes": 2})) == "kubernetes"
    assert settings.backend_for(resolve_spec({"nodes": 1})) == "local"
    assert ExecutorSettings.from_config({"slurm": {}}).backend_for(resolve_spec({"nodes": 2})) == (
        "slurm"
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"gang_backend": "kubernetes"}, "gang_backend='kubernetes' but there is no kubernetes"),
        ({"gang_backend": "k8s"}, "gang_backend='k8s'; use one of"),
    ],
)
def test_gang_backend_must_name_a_configured_backend(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ExecutorSettings.from_config(raw)
