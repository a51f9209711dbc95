"""What a pod's state means for the step: the reasons the executor relaunches or escalates on."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from k8s_ai_orchestrator.backends.base import FailureReason, StepState
from k8s_ai_orchestrator.backends.kubernetes.status import (
    SETTLE_S,
    carry_disruption,
    deleted_pod_status,
    oom_unsettled,
    pod_status,
    settled_pod_status,
)


def pod(
    phase: str,
    *,
    reason: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
    terminated: dict[str, Any] | None = None,
    waiting: dict[str, Any] | None = None,
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if terminated:
        state["terminated"] = terminated
    if waiting:
        state["waiting"] = waiting
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if reason:
        status["reason"], status["message"] = reason, f"{reason} happened"
    if state:
        status["containerStatuses"] = [{"name": "dagster", "state": state}]
    return {
        "metadata": {"name": "p"},
        "spec": {
            "nodeName": "node-a",
            "containers": [{"resources": {"limits": {"memory": "64Mi"}}}],
        },
        "status": status,
    }


def test_oom_killed_container_reports_oom_with_the_limit() -> None:
    status = pod_status(pod("Failed", terminated={"reason": "OOMKilled", "exitCode": 137}))
    assert (status.reason, status.exit_code) == (FailureReason.OOM_KILLED.value, 137)
    assert "64Mi" in status.message


@pytest.mark.parametrize(
    ("condition_reason", "expected"),
    [
        ("PreemptionByScheduler", FailureReason.PREEMPTED),
        ("PreemptionByKubeScheduler", FailureReason.PREEMPTED),
        ("EvictionByEvictionAPI", FailureReason.EVICTED),
        ("TerminationByKubelet", FailureReason.EVICTED),
        ("DeletionByTaintManager", FailureReason.LOST),
        ("DeletionByPodGC", FailureReason.LOST),
    ],
)
def test_disruption_target_condition_names_the_disruption(
    condition_reason: str, expected: FailureReason
) -> None:
    condition = {"type": "DisruptionTarget", "status": "True", "reason": condition_reason}
    failed = pod("Failed", conditions=[condition], terminated={"exitCode": 143})
    assert pod_status(failed).reason == expected.value
    # Still terminating: the step is saving its checkpoint in its grace period, so the
    # attempt has not ended yet and no relaunch may overlap it.
    terminating = pod_status(pod("Running", conditions=[condition]))
    assert terminating.state is StepState.RUNNING
    assert terminating.reason == expected.value  # what is coming, for the relaunch message
    # Saved and exited 0 inside the grace period: still the disruption, not a success.
    saved = pod("Succeeded", conditions=[condition], terminated={"exitCode": 0})
    assert pod_status(saved).reason == expected.value


@pytest.mark.parametrize(
    ("pod_reason", "expected"),
    [
        ("Evicted", FailureReason.EVICTED),
        ("NodeLost", FailureReason.LOST),
        ("DeadlineExceeded", FailureReason.DEADLINE_EXCEEDED),
    ],
)
def test_failed_pod_reason_is_mapped(pod_reason: str, expected: FailureReason) -> None:
    status = pod_status(pod("Failed", reason=pod_reason))
    assert status.reason == expected.value
    assert status.message == f"{pod_reason} happened"


@pytest.mark.parametrize(
    ("waiting_reason", "expected"),
    [
        ("ImagePullBackOff", FailureReason.IMAGE_PULL),
        ("ErrImagePull", FailureReason.IMAGE_PULL),
        ("CreateContainerConfigError", FailureReason.CONFIG_ERROR),
    ],
)
def test_hopeless_waiting_reasons_fail_fast_with_the_kubelet_message(
    waiting_reason: str, expected: FailureReason
) -> None:
    waiting = {"reason": waiting_reason, "message": 'secret "creds" not found'}
    status = pod_status(pod("Pending", waiting=waiting))
    assert (status.state, status.reason) == (StepState.FAILED, expected.value)
    assert status.message == 'secret "creds" not found'


def test_unschedulable_pod_is_pending_with_the_scheduler_message() -> None:
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
    }
    status = pod_status(pod("Pending", conditions=[condition]))
    assert status.state == StepState.PENDING
    assert (status.waiting, status.message) == (
        "Unschedulable",
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
    )


def test_non_zero_exit_is_a_plain_error_with_the_exit_code() -> None:
    status = pod_status(pod("Failed", terminated={"reason": "Error", "exitCode": 3}))
    assert (status.reason, status.exit_code) == (FailureReason.ERROR.value, 3)
    assert status.message == "exit code 3: Error"


def test_success_and_running_carry_the_node() -> None:
    assert pod_status(pod("Succeeded")).state == StepState.SUCCEEDED
    running = pod_status(pod("Running"))
    assert (running.state, running.node) == (StepState.RUNNING, "node-a")


def test_a_running_pod_deleted_behind_the_executors_back_is_lost() -> None:
    assert deleted_pod_status(pod("Running")).reason == FailureReason.LOST.value
    assert deleted_pod_status(pod("Succeeded")).state == StepState.SUCCEEDED


def test_a_pod_deleted_while_it_stopped_for_a_disruption_reads_as_that_disruption() -> None:
    """An evicted pod whose end was not seen before it went (its last state: Running, marked
    `DisruptionTarget`) was evicted, not lost: the gang it belonged to says so."""
    target = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    status = deleted_pod_status(pod("Running", conditions=[target]))
    assert (status.state, status.reason) == (StepState.FAILED, FailureReason.EVICTED)
    assert status.message.startswith("EvictionByEvictionAPI")
    preempting = {**target, "reason": "PreemptionByScheduler"}
    assert deleted_pod_status(pod("Running", conditions=[preempting])).reason == "Preempted"


ENDED = "2026-12-02T10:00:00Z"
AT_END = datetime.fromisoformat(ENDED).timestamp()


@pytest.mark.parametrize(
    ("terminated", "seconds_later", "unsettled"),
    [
        ({"reason": "Error", "exitCode": 137}, 1.0, True),  # the OOM event may follow
        ({"exitCode": 137}, 1.0, True),
        ({"reason": "Error", "exitCode": 137}, SETTLE_S, False),  # it did not come
        ({"reason": "OOMKilled", "exitCode": 137}, 1.0, False),  # said already
        ({"reason": "Error", "exitCode": 1}, 1.0, False),  # not a SIGKILL
    ],
)
def test_a_sigkilled_container_that_reads_only_error_is_decided_after_the_oom_settle_time(
    terminated: dict[str, Any], seconds_later: float, unsettled: bool
) -> None:
    failed = pod("Failed", terminated={**terminated, "finishedAt": ENDED})
    assert oom_unsettled(failed, AT_END + seconds_later) is unsettled


def test_a_sigkill_is_never_held_for_an_oom_without_a_memory_limit_or_with_a_pod_reason() -> None:
    sigkill = {"reason": "Error", "exitCode": 137, "finishedAt": ENDED}
    no_limit = pod("Failed", terminated=sigkill)
    no_limit["spec"]["containers"] = [{}]
    assert not oom_unsettled(no_limit, AT_END + 1)
    assert not oom_unsettled(pod("Failed", reason="Evicted", terminated=sigkill), AT_END + 1)


def test_an_eviction_a_vcluster_status_copy_erased_is_still_an_eviction() -> None:
    """vCluster's syncer replaces a deleting tenant pod's status with its host pod's, which has
    no DisruptionTarget: the condition the tenant's API server set at eviction is kept."""
    target = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    evicted = pod("Running", conditions=[target])
    copied = pod("Failed", terminated={"exitCode": 143, "reason": "Error"})
    for state in (evicted, copied):
        state["metadata"]["uid"] = "u1"
    assert pod_status(copied).reason == FailureReason.ERROR
    assert pod_status(carry_disruption(evicted, copied)).reason == FailureReason.EVICTED
    assert deleted_pod_status(carry_disruption(evicted, copied)).reason == FailureReason.EVICTED
    other = {**copied, "metadata": {"name": "p", "uid": "u2"}}  # a new pod of the same name
    assert carry_disruption(evicted, other) is other
    assert carry_disruption(None, copied) is copied


PREEMPTING = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}


def deleted(state: dict[str, Any], grace: int) -> dict[str, Any]:
    state["metadata"].update(deletionTimestamp=ENDED, deletionGracePeriodSeconds=grace)
    return state


@pytest.mark.parametrize(
    ("state", "seconds_later", "expected"),
    [
        # vCluster's syncer deleted it (grace 0) once its host pod was gone; the Job's
        # finalizer holds it: decided once no kubelet's word came within SETTLE_S
        (deleted(pod("Running", conditions=[PREEMPTING]), 0), 1.0, StepState.RUNNING),
        (deleted(pod("Running", conditions=[PREEMPTING]), 0), SETTLE_S, FailureReason.PREEMPTED),
        (deleted(pod("Running"), 0), SETTLE_S, FailureReason.LOST),
        (deleted(pod("Pending"), 0), SETTLE_S, FailureReason.LOST),
        # a graceful deletion before its deadline (deletionTimestamp): its kubelet ends it
        (deleted(pod("Running", conditions=[PREEMPTING]), 30), -10.0, StepState.RUNNING),
        # ... and past it, never ended: no kubelet will
        (deleted(pod("Running", conditions=[PREEMPTING]), 30), SETTLE_S, FailureReason.PREEMPTED),
        # ended before it was deleted: that end counts
        (deleted(pod("Failed", terminated={"exitCode": 1}), 0), SETTLE_S, FailureReason.ERROR),
        (deleted(pod("Succeeded"), 0), SETTLE_S, StepState.SUCCEEDED),
    ],
)
def test_a_deleted_pod_that_never_ended_is_decided_after_its_deadline_and_the_settle_time(
    state: dict[str, Any], seconds_later: float, expected: StepState | FailureReason
) -> None:
    status = settled_pod_status(state, AT_END + seconds_later)
    assert (status.reason if isinstance(expected, FailureReason) else status.state) == expected
