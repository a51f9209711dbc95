"""Pending explained with the autoscaler's words (scaleup.py, pending.py).

The messages are recorded from real clusters: Karpenter's `Nominated` and `FailedScheduling`
events, and the cluster-autoscaler's `TriggeredScaleUp`, `NotTriggerScaleUp` and
`FailedScaleUp` (each as `kubectl describe pod` showed it).
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from k8s_ai_orchestrator.backends.base import JobHandle, StepStatus
from k8s_ai_orchestrator.backends.kubernetes.pending import PendingExplainer
from k8s_ai_orchestrator.backends.kubernetes.scaleup import read_scale_event

SCHEDULER = (
    "0/12 nodes are available: 12 Insufficient nvidia.com/gpu. preemption: 0/12 nodes are "
    "available: 12 No preemption victims found for incoming pod."
)
KARPENTER_NOMINATED = "Pod should schedule on: nodeclaim/gpu-l4-x7k2q"
KARPENTER_REFUSED = (
    'Failed to schedule pod, incompatible with nodepool "teama-spot", daemonset overhead='
    '{"cpu":"150m","pods":"2"}, incompatible requirements, key capacity_type, capacity_type In '
    "[on-demand] not in capacity_type In [spot]; all available instance types exceed limits for "
    'nodepool "graviton"'
)
KARPENTER_NO_INSTANCE = (
    'Failed to schedule pod, incompatible with nodepool "gpu-pool", daemonset overhead='
    '{"cpu":"210m","memory":"240Mi","pods":"5"}, no instance type satisfied resources '
    '{"cpu":"1210m","memory":"4336Mi","nvidia.com/gpu":"1","pods":"6"} and requirements '
    "karpenter.k8s.aws/instance-family In [g5 p3 p4]"
)
# Karpenter v1.14.1 (kwok provider) on the test plane: a 9-GPU pod no shape holds, a pod for a
# pool at its limit, a pod that does not tolerate the GPU pool's taint (tests/karpenter/README.md)
KARPENTER_1_14_NO_SHAPE = (
    "Failed to schedule pod, no instance type has enough resources, requirements=karpenter.kwok"
    ".sh/kwoknodeclass In [default], karpenter.sh/initialized In [true], karpenter.sh/nodepool "
    "In [cpu], karpenter.sh/registered In [true], node.kubernetes.io/instance-type In [cpu-16 "
    'cpu-32 cpu-8], resources={"cpu":"8","memory":"64Gi","nvidia.com/gpu":"9","pods":"1"}; no '
    "instance type has enough resources, requirements=karpenter.sh/nodepool In [gpu], "
    'resources={"cpu":"8"}'
)
KARPENTER_1_14_LIMIT = (
    "Failed to schedule pod, did not tolerate taint (taint=nvidia.com/gpu=present:NoSchedule); "
    "all available instance types exceed limits for nodepool (NodePool=gpu)"
)
CA_TRIGGERED = "pod triggered scale-up: [{aks-gpunp-98036146-vmss 1->2 (max: 2)}]"
CA_NOT_TRIGGERED = "pod didn't trigger scale-up: 2 max node group size reached"
CA_FAILED = (
    "Node scale up in zones australia-southeast1-b associated with this pod failed: IP space "
    "exhausted. Pod is at risk of not being scheduled."
)


@pytest.mark.parametrize(
    ("reason", "message", "says", "coming"),
    [
        (
            "Nominated",
            KARPENTER_NOMINATED,
            "waiting for a node from NodePool 'gpu-l4' (NodeClaim gpu-l4-x7k2q, launched for "
            "it at 14:02:11 UTC)",
            True,
        ),
        (
            "Nominated",
            "Pod should schedule on: node/aks-default-v57bb",
            "waiting for node aks-default-v57bb, which Karpenter chose for it",
            True,
        ),
        (
            "FailedScheduling",
            KARPENTER_REFUSED,
            "Karpenter will not create a node for it: NodePool 'teama-spot' cannot hold it "
            "(incompatible requirements, key capacity_type, capacity_type In [on-demand] not in "
            "capacity_type In [spot]); NodePool 'graviton' is at its limit (spec.limits)",
            False,
        ),
        (
            "FailedScheduling",
            KARPENTER_NO_INSTANCE,
            "NodePool 'gpu-pool' cannot hold it (no instance type satisfied resources",
            False,
        ),
        (
            "FailedScheduling",
            KARPENTER_1_14_NO_SHAPE,
            "Karpenter will not create a node for it: NodePool 'cpu' cannot hold it (no instance "
            "type has enough resources); NodePool 'gpu' cannot hold it (no instance type has "
            "enough resources)",
            False,
        ),
        (
            "FailedScheduling",
            KARPENTER_1_14_LIMIT,
            "Karpenter will not create a node for it: did not tolerate taint "
            "(taint=nvidia.com/gpu=present:NoSchedule); NodePool 'gpu' is at its limit "
            "(spec.limits)",
            False,
        ),
        (
            "TriggeredScaleUp",
            CA_TRIGGERED,
            "waiting for a node: the cluster autoscaler grows node group "
            "aks-gpunp-98036146-vmss from 1 to 2 nodes (max 2)",
            True,
        ),
        (
            "NotTriggerScaleUp",
            CA_NOT_TRIGGERED,
            "the cluster autoscaler will not add a node for it: 2 max node group size reached",
            False,
        ),
        (
            "FailedScaleUp",
            CA_FAILED,
            "the cluster autoscaler's scale-up for it failed: IP space exhausted.",
            False,
        ),
    ],
)
def test_each_autoscaler_event_is_read_as_a_sentence(
    reason: str, message: str, says: str, coming: bool
) -> None:
    event = {"reason": reason, "message": message, "lastTimestamp": "2026-12-03T14:02:11Z"}
    word = read_scale_event(event)
    assert word is not None
    assert says in word.text
    assert word.coming is coming


def test_the_schedulers_own_failed_scheduling_is_not_an_autoscaler_word() -> None:
    assert read_scale_event({"reason": "FailedScheduling", "message": SCHEDULER}) is None
    assert read_scale_event({"reason": "Scheduled", "message": "Successfully assigned"}) is None


def _event(reason: str, message: str, at: str, kind: str = "Normal") -> dict[str, Any]:
    return {
        "type": kind,
        "reason": reason,
        "message": message,
        "lastTimestamp": at,
        "involvedObject": {"name": "job-0-abcde"},
    }


class _Core:
    """`list_namespaced_event` of a CoreV1Api, answering what the test holds now."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.reads = 0

    def list_namespaced_event(self, namespace: str, **_: Any) -> Any:
        self.reads += 1
        return SimpleNamespace(data=json.dumps({"items": self.events}))


UNSCHEDULABLE_POD = {
    "metadata": {"name": "job-0-abcde"},
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": SCHEDULER,
            }
        ],
    },
}


def test_an_unschedulable_pod_is_explained_by_the_newest_autoscaler_word_then_the_scheduler() -> (
    None
):
    now = [0.0]
    explainer = PendingExplainer(interval_s=5.0, clock=lambda: now[0])
    core = _Core()
    handle = JobHandle("kubernetes", "job-0", "train", "team-a", "default")

    first = explainer.explain(handle, "default", UNSCHEDULABLE_POD, core)  # type: ignore[arg-type]
    assert (first.waiting, first.message) == ("Unschedulable", SCHEDULER)

    core.events = [
        _event("FailedScheduling", SCHEDULER, "2026-12-03T14:02:10Z", "Warning"),
        _event("Nominated", KARPENTER_NOMINATED, "2026-12-03T14:02:11Z"),
    ]
    now[0] = 5.0
    nominated = explainer.explain(handle, "default", UNSCHEDULABLE_POD, core)  # type: ignore[arg-type]
    assert nominated.waiting == "Nominated"
    assert nominated.message == (
        "waiting for a node from NodePool 'gpu-l4' (NodeClaim gpu-l4-x7k2q, launched for it at "
        f"14:02:11 UTC); the scheduler: {SCHEDULER}"
    )

    now[0] = 6.0  # not due: the last word stands, no read
    reads = core.reads
    assert explainer.explain(handle, "default", UNSCHEDULABLE_POD, core) == nominated  # type: ignore[arg-type]
    assert core.reads == reads

    core.events.append(
        _event("FailedScheduling", KARPENTER_REFUSED, "2026-12-03T14:03:00Z", "Warning")
    )
    now[0] = 11.0
    refused = explainer.explain(handle, "default", UNSCHEDULABLE_POD, core)  # type: ignore[arg-type]
    assert refused.waiting == "FailedScheduling"
    assert "NodePool 'graviton' is at its limit" in refused.message
    assert refused.message.endswith(f"; the scheduler: {SCHEDULER}")

    explainer.forget("job-0")
    now[0] = 12.0
    assert explainer.explain(handle, "default", UNSCHEDULABLE_POD, core).waiting == "Unschedulable"  # type: ignore[arg-type]


def test_without_an_autoscaler_the_pending_reason_is_the_schedulers_as_before() -> None:
    now = [0.0]
    explainer = PendingExplainer(interval_s=0.0, clock=lambda: now[0])
    core = _Core()
    core.events = [_event("FailedScheduling", SCHEDULER, "2026-12-03T14:02:10Z", "Warning")]
    handle = JobHandle("kubernetes", "job-0", "train", "team-a", "default")
    status = explainer.explain(handle, "default", UNSCHEDULABLE_POD, core)  # type: ignore[arg-type]
    assert (status.waiting, status.message) == ("Unschedulable", SCHEDULER)


def test_a_pod_the_scheduler_has_not_looked_at_yet_costs_no_event_read() -> None:
    """A large fan-out's pods wait unbound and unmarked for seconds on a busy control plane;
    the default scheduler writes its condition with its event, so there is nothing to read.
    Once it has looked (a condition), or for a pod of another scheduler, events are read."""
    now = [0.0]
    explainer = PendingExplainer(interval_s=5.0, clock=lambda: now[0])
    core = _Core()
    handle = JobHandle("kubernetes", "job-0", "train", "team-a", "default")
    unseen = {"metadata": {"name": "job-0-abcde"}, "status": {"phase": "Pending"}}

    for now[0] in (0.0, 5.0, 10.0):
        assert explainer.explain(handle, "default", unseen, core) == StepStatus.pending()  # type: ignore[arg-type]
    assert core.reads == 0

    core.events = [_event("FailedScheduling", SCHEDULER, "2026-12-03T14:02:10Z", "Warning")]
    now[0] = 11.0  # first seen at 0: a read is due at once when the scheduler has spoken
    assert explainer.explain(handle, "default", UNSCHEDULABLE_POD, core).waiting == "Unschedulable"  # type: ignore[arg-type]
    assert core.reads == 1

    other = {**unseen, "spec": {"schedulerName": "volcano"}}
    now[0] = 20.0
    status = explainer.explain(handle, "default", other, core)  # type: ignore[arg-type]
    assert (status.waiting, core.reads) == ("FailedScheduling", 2)
