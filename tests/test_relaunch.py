"""The relaunch policy: preemptions at the same size, OOM escalation up to the cap; an
attempt whose relaunch is decided takes no more events from its own process."""

from k8s_ai_orchestrator.backends.base import FailureReason
from k8s_ai_orchestrator.launch.attempts import StepAttempts
from k8s_ai_orchestrator.launch.plan import PlannedStep
from k8s_ai_orchestrator.launch.relaunch import (
    OomEscalation,
    RelaunchPolicy,
    StepHistory,
    decide,
)
from k8s_ai_orchestrator.spec import GiB, resolve_spec

POLICY = RelaunchPolicy(OomEscalation(2, 8 * GiB, 4), max_preemption_retries=2)


def test_oom_doubles_memory():
    decision = decide(POLICY, StepHistory("s", (2 * GiB,)), FailureReason.OOM_KILLED)
    assert decision.relaunch and decision.memory_bytes == 4 * GiB
    assert "2Gi → 4Gi" in decision.message


def test_oom_growth_is_capped_at_max_memory():
    decision = decide(
        POLICY, StepHistory("s", (2 * GiB, 4 * GiB, 6 * GiB)), FailureReason.OOM_KILLED
    )
    assert decision.memory_bytes == 8 * GiB


def test_oom_at_the_cap_fails_with_every_size_tried():
    decision = decide(POLICY, StepHistory("s", (4 * GiB, 8 * GiB)), FailureReason.OOM_KILLED)
    assert not decision.relaunch
    assert "4Gi, 8Gi" in decision.message and "compute(memory=...)" in decision.message


def test_preemption_relaunches_at_the_same_size_until_the_budget_is_spent():
    first = decide(POLICY, StepHistory("s", (2 * GiB,)), FailureReason.PREEMPTED)
    assert first.relaunch and first.memory_bytes == 2 * GiB
    spent = decide(POLICY, StepHistory("s", (2 * GiB,) * 3, preemptions=2), FailureReason.EVICTED)
    assert not spent.relaunch and "max_preemption_retries=2" in spent.message


def test_user_errors_are_not_relaunched():
    assert not decide(POLICY, StepHistory("s", (GiB,)), FailureReason.ERROR).relaunch


def test_a_process_that_starts_after_its_attempt_s_relaunch_was_decided_is_stale():
    """A gang's step process started late on a node that failed: the run worker decided the
    relaunch from the scheduler first, then the process tells of its start and interruption.
    Deciding that failure again would launch the step twice."""
    run_worker = 7
    live = StepAttempts.of(PlannedStep("train", resolve_spec({}), "slurm", None), None)
    live.launched()
    live.record_relaunch(FailureReason.LOST, None)  # from the health check: NODE_FAIL

    live.worker_started(441)  # the failed attempt's process, late
    assert live.stale_failure(441, run_worker)
    assert live.stale_failure(None, run_worker)

    live.launched()  # the relaunch
    live.worker_started(512)
    assert not live.stale_failure(512, run_worker)
    assert live.stale_failure(441, run_worker)
