"""Multi-node steps on Kubernetes: one state for a gang's pods, and room for all of them.

A gang is one Indexed Job with one pod per node (see `jobs.py`). Its state is read from all
its pods at once: a disrupted pod (preempted, evicted, node lost) stands for the whole gang,
which the Job's pod failure policy fails and the executor relaunches from its checkpoint; a
finished leader (index 0, the step process) stands for the step; a failed worker fails it.
A rank deleted before its end reached the tenant reads Lost, or Preempted where the
scheduler's `Preempted` event on it says so (`lost_pods`, then `gang_status(preempted=...)`).
A disrupted pod that no kubelet will end (its host pod vanished under a vCluster tenant:
`status.force_deleted_status`) never reaches the Failed phase the failure policy waits for, so
the Job never stops the other pods: the backend deletes the Job (`abandoned_rank`).

Whatever admits the gang (`admission/`), some of its pods may run while others wait: the gang
is Pending then, and fails once not all run `all_running_timeout_s` after the first one
(`partial_gang`), so that a partial gang holds no GPUs.

Example:
    >>> running = {"metadata": {"annotations": {INDEX_KEY: "0"}}, "spec": {"nodeName": "n1"},
    ...            "status": {"phase": "Running"}}
    >>> gang_status([running], [], nodes=2, now=0.0).state
    <StepState.PENDING: 'Pending'>
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..base import RELAUNCH_REASONS, FailureReason, StepState, StepStatus
from .preemption import preempted_unseen
from .status import (
    condition_of,
    deleted_pod_status,
    force_deleted_status,
    pod_name,
    pod_status,
    settled_pod_status,
)

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
# kube-scheduler's message for a gang it cannot place whole (`gang_admission.mode: workload`).
POD_GROUP_UNSCHEDULABLE = "pod group is unschedulable"

Pod = Mapping[str, Any]


def pod_index(pod: Pod) -> int:
    """The pod's completion index (its node rank); -1 if it has none."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return int(annotations.get(INDEX_KEY, -1))


def gang_status(
    pods: Sequence[Pod],
    gone: Sequence[Pod],
    nodes: int,
    *,
    now: float,
    preempted: Mapping[str, str] | None = None,
) -> StepStatus:
    """The state of a gang from its live pods and the last state of its deleted ones, at `now`
    (epoch seconds): a rank that may still turn out OOM-killed reads Running until it settles
    (`settled_pod_status`), so that the gang is relaunched with more memory, not as an Error.
    `preempted`: the scheduler's `Preempted` event message by pod name, for the ranks that
    read Lost (`lost_pods`)."""
    seen = _seen(pods, gone, now, preempted or {})
    for pod, status in seen:
        if status.reason in RELAUNCH_REASONS:
            ended = all(_ended(p) or force_deleted_status(p, now) for p in pods)
            return _whole_gang(pod, status, nodes, ended=ended)
    leader = [status for pod, status in seen if pod_index(pod) == 0 and status.is_terminal]
    if leader:
        return leader[0]
    for pod, status in seen:
        if status.state == StepState.FAILED:
            return _whole_gang(pod, status, nodes, ended=True)
    running = [status for pod, status in seen if status.state == StepState.RUNNING]
    if len(running) >= nodes:
        return StepStatus.running(_leader_node(pods))
    waiting = [status for _, status in seen if status.state == StepState.PENDING]
    return waiting[0] if waiting else StepStatus.pending()


def abandoned_rank(status: StepStatus, pods: Sequence[Pod], *, now: float) -> Pod | None:
    """A gang `status` says is stopping for a disruption (`gang_status`: Running, a relaunch
    reason) whose disrupted pod no kubelet will end: the pod, for the backend to delete its
    Job; None while the Job's failure policy can still stop the other pods itself.

    Example:
        >>> gone = {"metadata": {"name": "r1", "deletionTimestamp": "2026-12-02T10:00:00Z"},
        ...         "status": {"phase": "Running"}}
        >>> stopping = StepStatus(StepState.RUNNING, FailureReason.PREEMPTED, "gang pod 1 of 2")
        >>> abandoned_rank(stopping, [gone], now=1_900_000_000.0)["metadata"]["name"]
        'r1'
    """
    if status.state is not StepState.RUNNING or status.reason not in RELAUNCH_REASONS:
        return None
    return next((pod for pod in pods if force_deleted_status(pod, now) is not None), None)


def lost_pods(pods: Sequence[Pod], gone: Sequence[Pod], *, now: float) -> list[Pod]:
    """The gang's ranks that read Lost: deleted before their end reached the tenant, for the
    backend to look for the scheduler's `Preempted` event on them.

    Example:
        >>> gone = {"metadata": {"name": "r1"}, "status": {"phase": "Running"}}
        >>> [pod_name(p) for p in lost_pods([], [gone], now=0.0)]
        ['r1']
    """
    return [
        pod for pod, status in _seen(pods, gone, now, {}) if status.reason == FailureReason.LOST
    ]


def preempted_pods(
    pods: Sequence[Pod], gone: Sequence[Pod], preempted: Mapping[str, str] | None = None
) -> list[Pod]:
    """The gang's pods the scheduler preempted (stopping or ended; or Lost with a `Preempted`
    event: `preempted`, by pod name), whose preemptor names the gang's (see
    `preemption.name_preemptor_of_any`)."""
    seen = [(pod, pod_status(pod)) for pod in pods]
    seen += [(pod, deleted_pod_status(pod)) for pod in gone]
    said = preempted or {}
    return [
        pod
        for pod, status in seen
        if status.reason == FailureReason.PREEMPTED or said.get(pod_name(pod))
    ]


def pending_pod(pods: Sequence[Pod]) -> Pod | None:
    """The pod a Pending gang waits for, for its reason: the one kube-scheduler gave the pod
    group's reason (`pod group is unschedulable, minCount ...`) if any, else the first not yet
    running. The scheduler reports the group's reason on one of its pods only, and its own filter
    message ("0/2 nodes are available ...") on the others."""
    waiting = [p for p in pods if (p.get("status") or {}).get("phase") in (None, "Pending")]
    for pod in waiting:
        scheduled = condition_of(pod.get("status") or {}, "PodScheduled") or {}
        if str(scheduled.get("message") or "").startswith(POD_GROUP_UNSCHEDULABLE):
            return pod
    return waiting[0] if waiting else None


def running_count(pods: Iterable[Pod]) -> int:
    return sum(1 for pod in pods if (pod.get("status") or {}).get("phase") == "Running")


def _seen(
    pods: Sequence[Pod], gone: Sequence[Pod], now: float, preempted: Mapping[str, str]
) -> list[tuple[Pod, StepStatus]]:
    """Each rank with how it stands at `now`: live ones settled, deleted ones as last seen; a
    Lost one Preempted where its `Preempted` event is known."""
    seen = [(pod, settled_pod_status(pod, now)) for pod in pods]
    seen += [(pod, deleted_pod_status(pod)) for pod in gone]
    return [(p, preempted_unseen(s, p, preempted.get(pod_name(p), ""))) for p, s in seen]


def _whole_gang(pod: Pod, status: StepStatus, nodes: int, *, ended: bool) -> StepStatus:
    where = f" on {status.node}" if status.node else ""
    message = f"gang pod {pod_index(pod)} of {nodes} ({pod_name(pod)}{where}): {status.message}"
    if not ended:  # the other pods are still stopping: the relaunch must not overlap them
        return StepStatus(StepState.RUNNING, status.reason, message, node=status.node)
    reason = status.reason or FailureReason.ERROR
    return StepStatus.failed(reason, message, status.exit_code, status.node)


def _ended(pod: Pod) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _leader_node(pods: Sequence[Pod]) -> str | None:
    for pod in pods:
        if pod_index(pod) == 0:
            return (pod.get("spec") or {}).get("nodeName")
    return None


def partial_gang(
    step: str, tenant: str, *, nodes: int, running: int, waited_s: float, why: str, limit_s: float
) -> StepStatus:
    """Pending while some pods run and the others may still come; a failure (delete the
    gang) once they have not for `limit_s` (the tenant's `all_running_timeout_s`).

    Example:
        >>> partial_gang("train", "t", nodes=2, running=1, waited_s=10, why="-",
        ...     limit_s=300).waiting
        'GangPartiallyRunning'
    """
    if waited_s <= limit_s:
        return StepStatus.pending(
            "GangPartiallyRunning", f"{running} of {nodes} gang pods running; {why}"
        )
    return StepStatus.failed(
        FailureReason.UNSCHEDULABLE,
        f"gang step '{step}' in tenant '{tenant}': only {running} of {nodes} pods were "
        f"running {limit_s:g}s after the first one started (waiting pod: {why}); the whole "
        f"gang was deleted so that a partial gang holds no GPUs; free room for {nodes} pods "
        f"or raise kubernetes.tenants.{tenant}.gang_admission.all_running_timeout_s (and "
        "provisioning_timeout_s, the time added while an autoscaler says a node is coming)",
    )
