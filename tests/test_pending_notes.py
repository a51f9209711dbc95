"""When a step is said to be Pending (`launch.lifecycle.Attempt.observe`): a reason from the
scheduler, a quota or the kubelet at once; no reason only once the wait has lasted
`STARTING_QUIET_S` (a large fan-out on a busy cluster takes 15-25 s to start its pods), and
each reason once."""

from __future__ import annotations

from k8s_ai_orchestrator.backends.base import JobHandle, StepStatus
from k8s_ai_orchestrator.launch.lifecycle import STARTING_QUIET_S, Attempt


def said(attempt: Attempt, status: StepStatus, now: float) -> list[str]:
    return [note.message for note in attempt.observe(status, now).notes]


def test_a_step_pending_without_a_reason_is_said_pending_only_after_the_quiet_time() -> None:
    starting = Attempt(JobHandle("kubernetes", "j-1", "train"), launched_at=100.0)

    assert said(starting, StepStatus.pending(), 100.0 + 20.0) == []
    assert said(starting, StepStatus.pending(), 100.0 + STARTING_QUIET_S - 0.1) == []
    assert said(starting, StepStatus.pending(), 100.0 + STARTING_QUIET_S) == [
        "Step 'train' is Pending: no reason reported yet"
    ]
    assert said(starting, StepStatus.pending(), 100.0 + STARTING_QUIET_S + 1.0) == []


def test_a_reason_is_said_at_once_and_again_only_when_it_changes() -> None:
    waiting = Attempt(JobHandle("kubernetes", "j-1", "train"), launched_at=100.0)
    unschedulable = StepStatus.pending("Unschedulable", "0/2 nodes are available")

    assert said(waiting, unschedulable, 100.1) == [
        "Step 'train' is Pending: 0/2 nodes are available"
    ]
    assert said(waiting, unschedulable, 101.0) == []
    quota = StepStatus.pending("FailedCreate", "exceeded quota: tight")
    assert said(waiting, quota, 102.0) == ["Step 'train' is Pending: exceeded quota: tight"]
