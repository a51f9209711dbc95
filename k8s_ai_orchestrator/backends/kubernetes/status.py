"""Pod state → `StepStatus`, with the reason the executor acts on. Pure: no I/O.

The mapping reads what a real kubelet, scheduler and Job controller write: container
`terminated.reason` (OOMKilled), pod `status.reason` (Evicted, NodeLost, DeadlineExceeded),
the `DisruptionTarget` condition (PreemptionByScheduler, EvictionByEvictionAPI,
DeletionByTaintManager...), the `PodScheduled=False` condition carrying the scheduler's message,
and container `waiting` reasons that can never resolve by themselves (ImagePullBackOff...).

Example:
    >>> pod = {"status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated":
    ...        {"reason": "OOMKilled", "exitCode": 137}}}]}}
    >>> pod_status(pod).reason
    <FailureReason.OOM_KILLED: 'OOMKilled'>
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..base import FailureReason, StepState, StepStatus

# How long a late word about a pod's end is waited for before the pod is decided:
# - the kernel's OOM kill can reach the kubelet after the container's exit (containerd's OOM
#   and exit events race, notably on cgroup v1): the container first reads `Error`, exit 137,
#   then `OOMKilled`;
# - a deleted pod (`force_deleted_status`) gets its terminal phase from its kubelet within a
#   second or two of its deletion deadline, if it has one.
SETTLE_S = 5.0

# DisruptionTarget condition reasons (current and pre-1.27 spellings).
_DISRUPTION_REASONS = {
    "PreemptionByScheduler": FailureReason.PREEMPTED,
    "PreemptionByKubeScheduler": FailureReason.PREEMPTED,
    "EvictionByEvictionAPI": FailureReason.EVICTED,
    "TerminationByKubelet": FailureReason.EVICTED,
    "DeletionByTaintManager": FailureReason.LOST,
    "DeletionByPodGC": FailureReason.LOST,
}

# Pod `status.reason` values of a failed pod.
_POD_REASONS = {
    "Evicted": FailureReason.EVICTED,
    "Preempting": FailureReason.PREEMPTED,
    "NodeLost": FailureReason.LOST,
    "NodeShutdown": FailureReason.LOST,
    "Terminated": FailureReason.LOST,
    "UnexpectedAdmissionError": FailureReason.LOST,
    "DeadlineExceeded": FailureReason.DEADLINE_EXCEEDED,
}

# A finished Job's `Failed` condition reasons, for an attempt whose pods are gone (deleted by
# an eviction or preemption while no run worker watched): the Job is all that is left.
_JOB_REASONS = {
    "PodFailurePolicy": FailureReason.LOST,  # a pod had DisruptionTarget: preempted, evicted...
    "BackoffLimitExceeded": FailureReason.ERROR,  # the step process failed
    "DeadlineExceeded": FailureReason.DEADLINE_EXCEEDED,
}

# Container waiting reasons that fail the step at once: waiting longer cannot help.
FAIL_FAST_WAITING = {
    "ImagePullBackOff": FailureReason.IMAGE_PULL,
    "ErrImagePull": FailureReason.IMAGE_PULL,
    "InvalidImageName": FailureReason.IMAGE_PULL,
    "CreateContainerConfigError": FailureReason.CONFIG_ERROR,
    "CreateContainerError": FailureReason.CONFIG_ERROR,
}


def pod_status(pod: Mapping[str, Any]) -> StepStatus:
    """The step status a pod (API JSON form) stands for."""
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    phase = status.get("phase") or "Pending"
    disruption = disruption_target(status)
    if phase == "Succeeded" and disruption is not None:
        # The step process saved its checkpoint and exited cleanly inside its grace period.
        return _disrupted(disruption, node, exit_code=0)
    if phase == "Succeeded":
        return StepStatus.succeeded(node)
    if phase == "Failed":
        return failed_pod_status(pod)
    waiting = _waiting(status)
    if waiting is not None and waiting[0] in FAIL_FAST_WAITING:
        return StepStatus.failed(FAIL_FAST_WAITING[waiting[0]], waiting[1], node=node)
    if phase == "Running":
        # A disrupted pod still running is inside its grace period, saving its checkpoint:
        # it ends when its containers have exited, so a relaunch never overlaps it. The
        # reason already says what is coming (Evicted, Preempted, Lost).
        if disruption is not None:
            coming = _DISRUPTION_REASONS.get(disruption.get("reason") or "")
            return StepStatus(StepState.RUNNING, coming or FailureReason.EVICTED, node=node)
        return StepStatus.running(node)
    if disruption is not None:
        return _disrupted(disruption, node)
    return pending_status(pod)


def failed_pod_status(pod: Mapping[str, Any]) -> StepStatus:
    """Why a pod in phase Failed failed: disruption, pod reason, OOM or the exit code."""
    status = pod.get("status") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    terminated = _terminated(status)
    exit_code = terminated.get("exitCode") if terminated else None
    disruption = disruption_target(status)
    if disruption is not None:
        return _disrupted(disruption, node, exit_code)
    reason = status.get("reason")
    if reason in _POD_REASONS:
        message = status.get("message") or reason
        return StepStatus.failed(_POD_REASONS[reason], message, exit_code, node)
    if terminated and terminated.get("reason") == "OOMKilled":
        message = "container exceeded its memory limit"
        limit = _memory_limit(pod)
        if limit:
            message = f"container exceeded its memory limit of {limit}"
        return StepStatus.failed(FailureReason.OOM_KILLED, message, exit_code or 137, node)
    detail = (terminated or {}).get("message") or (terminated or {}).get("reason") or "Error"
    message = f"exit code {exit_code}: {detail}" if exit_code is not None else detail
    return StepStatus.failed(FailureReason.ERROR, message, exit_code, node)


def oom_unsettled(pod: Mapping[str, Any], now: float) -> bool:
    """Whether a failed pod may still turn out OOM-killed (`SETTLE_S`): its container was
    SIGKILLed (exit 137) and reads only `Error`, it had a memory limit, and it ended less than
    `SETTLE_S` before `now` (epoch seconds; the kubelet's `finishedAt` is whole seconds).

    Example:
        >>> pod = {"spec": {"containers": [{"resources": {"limits": {"memory": "1Gi"}}}]},
        ...        "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated":
        ...        {"reason": "Error", "exitCode": 137, "finishedAt": "2026-12-02T10:00:00Z"}}}]}}
        >>> at = datetime.fromisoformat("2026-12-02T10:00:02Z").timestamp()
        >>> oom_unsettled(pod, at), oom_unsettled(pod, at + SETTLE_S)
        (True, False)
    """
    status = pod.get("status") or {}
    terminated = _terminated(status)
    if status.get("phase") != "Failed" or terminated is None or _memory_limit(pod) is None:
        return False
    if terminated.get("exitCode") != 137 or terminated.get("reason") not in (None, "Error"):
        return False
    if condition_of(status, "DisruptionTarget") is not None or status.get("reason"):
        return False  # a disruption or a pod reason says why already
    finished = terminated.get("finishedAt")
    if not finished:
        return True
    return now - datetime.fromisoformat(finished).timestamp() < SETTLE_S


def settled_pod_status(pod: Mapping[str, Any], now: float) -> StepStatus:
    """`pod_status`, except that a failure that may still turn out OOM-killed (`oom_unsettled`)
    reads Running until it settles: the kernel's OOM event can reach the kubelet after the exit,
    and a step relaunched as an Error would not get more memory. For every pod the executor
    watches, a single one or a gang's.

    Example:
        >>> pod = {"spec": {"containers": [{"resources": {"limits": {"memory": "1Gi"}}}]},
        ...        "status": {"phase": "Failed", "containerStatuses": [{"state": {"terminated":
        ...        {"reason": "Error", "exitCode": 137, "finishedAt": "2026-12-02T10:00:00Z"}}}]}}
        >>> at = datetime.fromisoformat("2026-12-02T10:00:02Z").timestamp()
        >>> settled_pod_status(pod, at).state, settled_pod_status(pod, at + SETTLE_S).state
        (<StepState.RUNNING: 'Running'>, <StepState.FAILED: 'Failed'>)
    """
    current = pod_status(pod)
    if current.state is StepState.FAILED and oom_unsettled(pod, now):
        return StepStatus.running(current.node)
    if not current.is_terminal:
        return force_deleted_status(pod, now) or current
    return current


def force_deleted_status(pod: Mapping[str, Any], now: float) -> StepStatus | None:
    """How a pod ended that is being deleted and never reached a terminal phase, once
    `SETTLE_S` have passed since its deletion deadline (`now`: epoch seconds); None for any
    other pod.

    A deleted pod's `deletionTimestamp` is the deadline by which its kubelet has killed its
    containers (the delete's time plus its grace period) and written its end. A pod past it,
    still not ended, has no kubelet that will end it; only a finalizer (the Job controller's
    tracking one) keeps the object. On a vCluster tenant this is what the syncer leaves when the
    host pod disappears before its last status was copied: the tenant pod deleted (with its
    grace period, then with none), Running, its Job active, for ever.

    Example:
        >>> pod = {"metadata": {"name": "p", "deletionTimestamp": "2026-12-02T10:00:00Z",
        ...     "deletionGracePeriodSeconds": 0}, "status": {"phase": "Running"}}
        >>> at = datetime.fromisoformat("2026-12-02T10:00:01Z").timestamp()
        >>> force_deleted_status(pod, at) is None, force_deleted_status(pod, at + SETTLE_S).reason
        (True, <FailureReason.LOST: 'Lost'>)
    """
    deadline = (pod.get("metadata") or {}).get("deletionTimestamp")
    phase = (pod.get("status") or {}).get("phase")
    if not deadline or phase in ("Succeeded", "Failed"):
        return None
    if now - datetime.fromisoformat(deadline).timestamp() < SETTLE_S:
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    disruption = disruption_target(pod.get("status") or {})
    if disruption is not None:
        return _disrupted(disruption, node)
    message = f"pod {pod_name(pod)} was deleted and not ended by its deletion deadline"
    return StepStatus.failed(FailureReason.LOST, message, node=node)


# PodScheduled=False reasons of a pod that waits for a node: an autoscaler may be making one
UNSCHEDULABLE = frozenset({"Unschedulable"})


def pending_status(pod: Mapping[str, Any]) -> StepStatus:
    """A Pending step with the scheduler's or kubelet's reason, if any."""
    status = pod.get("status") or {}
    scheduled = condition_of(status, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        return StepStatus.pending(
            scheduled.get("reason") or "Unschedulable", scheduled.get("message") or ""
        )
    waiting = _waiting(status)
    if waiting is not None:
        return StepStatus.pending(waiting[0], waiting[1])
    return StepStatus.pending()


def deleted_pod_status(pod: Mapping[str, Any]) -> StepStatus:
    """A pod deleted before it finished, by someone other than the executor: as it ended, or
    as its `DisruptionTarget` says where it was last seen stopping (an eviction's pod can go
    before its end is seen), else Lost."""
    last = pod_status(pod)
    if last.is_terminal:
        return last
    node = (pod.get("spec") or {}).get("nodeName")
    disruption = disruption_target(pod.get("status") or {})
    if disruption is not None:
        return _disrupted(disruption, node)
    return StepStatus.failed(
        FailureReason.LOST, f"pod {pod_name(pod)} was deleted before it finished", node=node
    )


def job_status(job: Mapping[str, Any]) -> StepStatus | None:
    """How a finished Job ended, from its `Complete` / `Failed` condition; None while it runs.

    Example:
        >>> job_status({"status": {"conditions": [{"type": "Failed", "status": "True",
        ...     "reason": "PodFailurePolicy", "message": "Pod x has condition DisruptionTarget"}]}},
        ... )
        ... # doctest: +NORMALIZE_WHITESPACE
        StepStatus(state=<StepState.FAILED: 'Failed'>, reason=<FailureReason.LOST: 'Lost'>,
                   message='Job failed: Pod x has condition DisruptionTarget',
                   exit_code=None, node=None, waiting='')
    """
    status = job.get("status") or {}
    complete, failed = condition_of(status, "Complete"), condition_of(status, "Failed")
    if complete is not None and complete.get("status") == "True":
        return StepStatus.succeeded()
    if failed is None or failed.get("status") != "True":
        return None
    why = failed.get("message") or failed.get("reason") or "no reason given"
    reason = _JOB_REASONS.get(str(failed.get("reason")), FailureReason.ERROR)
    return StepStatus.failed(reason, f"Job failed: {why}")


def pod_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name", "?"))


def _disrupted(
    condition: Mapping[str, Any], node: str | None, exit_code: int | None = None
) -> StepStatus:
    reason = condition.get("reason") or ""
    failure = _DISRUPTION_REASONS.get(reason, FailureReason.EVICTED)
    message = condition.get("message") or reason
    return StepStatus.failed(failure, f"{reason}: {message}", exit_code, node)


def disruption_target(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """A pod's `DisruptionTarget` condition when it is set (status True), else None."""
    condition = condition_of(status, "DisruptionTarget")
    return condition if condition is not None and condition.get("status") == "True" else None


def condition_of(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The condition of type `kind` in an object's `status`, or None."""
    for condition in status.get("conditions") or ():
        if condition.get("type") == kind:
            return condition
    return None


def carry_disruption(
    before: Mapping[str, Any] | None, after: Mapping[str, Any]
) -> Mapping[str, Any]:
    """`after` (a pod's new state), with the `DisruptionTarget=True` condition `before` (its
    previous state, the same pod) had and `after` lacks.

    The API server sets that condition when it evicts or preempts a pod, and Kubernetes never
    takes it back. vCluster's syncer does: while the host pod is being deleted, it replaces the
    tenant pod's whole status with the host pod's, and the host pod, deleted by the syncer
    rather than evicted, has no such condition. So a tenant pod evicted through the tenant's
    API shows it for a moment only; the pod's end is still an eviction.

    Example:
        >>> target = {"type": "DisruptionTarget", "status": "True",
        ...     "reason": "EvictionByEvictionAPI"}
        >>> evicted = {"metadata": {"uid": "u1"},
        ...     "status": {"phase": "Running", "conditions": [target]}}
        >>> copied = {"metadata": {"uid": "u1"}, "status": {"phase": "Failed"}}
        >>> pod_status(carry_disruption(evicted, copied)).reason
        <FailureReason.EVICTED: 'Evicted'>
    """
    if before is None or (before.get("metadata") or {}).get("uid") != (
        after.get("metadata") or {}
    ).get("uid"):
        return after
    seen = disruption_target(before.get("status") or {})
    status = after.get("status") or {}
    if seen is None or condition_of(status, "DisruptionTarget"):
        return after
    conditions = [*(status.get("conditions") or ()), seen]
    return {**after, "status": {**status, "conditions": conditions}}


def gang_wait(pods: Iterable[Mapping[str, Any]], now: float) -> float:
    """Node-seconds a gang's pods ran before `now` (epoch seconds): the moment they all run,
    or the moment a gang that never ran whole ended. Each pod from its first container's start
    to its last one's end (or `now`), by the kubelet's timestamps (whole seconds).

    Example:
        >>> def pod(started, ended=None):
        ...     state = {"startedAt": started, **({"finishedAt": ended} if ended else {})}
        ...     kind = "terminated" if ended else "running"
        ...     return {"status": {"containerStatuses": [{"state": {kind: state}}]}}
        >>> at = datetime.fromisoformat("2026-12-02T10:00:30Z").timestamp()
        >>> gang_wait([pod("2026-12-02T10:00:00Z"), pod("2026-12-02T10:00:30Z")], at)
        30.0
        >>> gang_wait([pod("2026-12-02T10:00:00Z", "2026-12-02T10:00:20Z")], at)
        20.0
    """
    return _node_seconds([container_ages([pod], now) for pod in pods])


def gang_seen_ended(
    pods: Sequence[Mapping[str, Any]], nodes: int, now: float
) -> tuple[float | None, float]:
    """A gang first seen ended (never seen running whole): how long before `now` (epoch
    seconds) all its ranks ran (None: it never ran whole), and its ranks' node-seconds of
    waiting: before that moment, or, never whole, all they ran (`gang_wait`).

    Example:
        >>> def pod(started):
        ...     return {"status": {"containerStatuses": [{"state": {"terminated": {
        ...         "startedAt": started, "finishedAt": "2026-12-02T10:00:40Z"}}}]}}
        >>> at = datetime.fromisoformat("2026-12-02T10:01:00Z").timestamp()
        >>> both = [pod("2026-12-02T10:00:00Z"), pod("2026-12-02T10:00:10Z")]
        >>> gang_seen_ended(both, 2, at)  # whole 50 s ago, rank 0 waited 10 s for rank 1
        (50.0, 10.0)
        >>> gang_seen_ended(both[:1], 2, at)  # rank 1 never started: rank 0's 40 s
        (None, 40.0)
    """
    ages = [container_ages([pod], now) for pod in pods]
    starts = [started for started, ended in ages if (started, ended) != (0.0, None)]
    if len(starts) < nodes:
        return None, _node_seconds(ages)
    whole = min(starts)
    return whole, sum(start - whole for start in starts)


def _node_seconds(ages: Iterable[tuple[float, float | None]]) -> float:
    """What pods ran, from each one's (started, ended) ages (`container_ages`)."""
    return sum(started - (ended or 0.0) for started, ended in ages)


def container_ages(pods: Iterable[Mapping[str, Any]], now: float) -> tuple[float, float | None]:
    """How long before `now` (epoch seconds) the pods' containers first started and last
    ended, by the kubelet's timestamps: what an adopted attempt ran while no run worker
    watched. (0.0, None) when nothing started; None when one has not ended.

    Example:
        >>> pod = {"status": {"containerStatuses": [{"state": {"terminated": {
        ...     "startedAt": "2026-12-02T10:00:00Z", "finishedAt": "2026-12-02T10:00:30Z"}}}]}}
        >>> container_ages([pod], datetime.fromisoformat("2026-12-02T10:01:00Z").timestamp())
        (60.0, 30.0)
    """
    starts: list[float] = []
    ends: list[float | None] = []
    for pod in pods:
        for container in (pod.get("status") or {}).get("containerStatuses") or ():
            state = container.get("state") or {}
            times = state.get("running") or state.get("terminated") or {}
            if times.get("startedAt"):
                starts.append(datetime.fromisoformat(times["startedAt"]).timestamp())
                end = times.get("finishedAt")
                ends.append(datetime.fromisoformat(end).timestamp() if end else None)
    if not starts:
        return 0.0, None
    started = max(0.0, now - min(starts))
    if None in ends:  # one still runs
        return started, None
    return started, max(0.0, now - max(e for e in ends if e is not None))


def _terminated(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for container in status.get("containerStatuses") or ():
        state = container.get("state") or {}
        if state.get("terminated"):
            return state["terminated"]
        last = (container.get("lastState") or {}).get("terminated")
        if last:
            return last
    return None


def _waiting(status: Mapping[str, Any]) -> tuple[str, str] | None:
    for container in status.get("containerStatuses") or ():
        waiting = (container.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
            return waiting["reason"], waiting.get("message") or waiting["reason"]
    return None


def _memory_limit(pod: Mapping[str, Any]) -> str | None:
    for container in (pod.get("spec") or {}).get("containers") or ():
        limit = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        if limit:
            return str(limit)
    return None
