"""The executor's side of a relaunch: which reason stopped an attempt, the retry event that
relaunches it without spending the op's RetryPolicy, and the words that say so.

The decision itself is `launch.relaunch.decide` (pure); what the attempt's history holds when
it decides (sizes tried, in-place growths already absorbed) is kept by `StepAttempts`, so the
order in which events are written does not change it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dagster._core.events import DagsterEvent, DagsterEventType, StepRetryData
from dagster._core.execution.context.system import IStepContext
from dagster._grpc.types import ExecuteStepArgs
from dagster._utils.error import SerializableErrorInfo
from dagster_shared.record import copy as copy_record

from ..backends.base import RELAUNCH_REASONS, Capabilities, FailureReason, StepState, StepStatus
from ..errors import BackendError
from ..launch.attempts import StepAttempts
from ..launch.relaunch import decide
from ..launch.settings import ExecutorSettings
from .step_events import interrupted, interrupted_error, work_lost

INFRASTRUCTURE = frozenset({FailureReason.OOM_KILLED, *RELAUNCH_REASONS})
Status = Callable[[StepAttempts], StepStatus]
Event = Callable[[IStepContext, str, Mapping[str, Any]], DagsterEvent]


class Relaunches:
    """Relaunch decisions for the handler's live steps, written as engine events."""

    def __init__(self, settings: ExecutorSettings, status: Status, event: Event) -> None:
        self._settings = settings
        self._status = status  # the live attempt's status (transient errors absorbed)
        self._event = event

    def after_failure(
        self,
        live: StepAttempts,
        caps: Capabilities,
        step_context: IStepContext,
        error: SerializableErrorInfo | None,
        failure: DagsterEvent | None,
    ) -> DagsterEvent | None:
        """A retry event when the attempt failed for an infrastructure reason and may relaunch;
        else None (and `live.fail_message` says why not, when a decision refused it)."""
        if live.attempt is None or live.cancelled:
            return None
        status = self._status(live)
        # an attempt gone without a trace says nothing; the step's own failure then decides
        known = status.state is StepState.FAILED and not (live.attempt.vanished and failure)
        reason = _infrastructure(status) if known else None
        if reason is None and interrupted(failure):
            reason = _coming(status) or FailureReason.PREEMPTED
        if reason is None:
            return None
        decision = decide(self._settings.relaunch, live.history, reason)
        said = error
        if said is None and failure is not None and failure.is_step_failure:
            said = failure.step_failure_data.error
        live.failed_for(reason, work_lost(said) if reason in RELAUNCH_REASONS else None)
        if not decision.relaunch:
            live.fail_message = decision.message
            return None
        live.record_relaunch(reason, decision.memory_bytes)
        detail = status.message
        if reason is FailureReason.PREEMPTED:
            detail = with_preemptor(live, caps, detail)
        why = f" ({detail})" if detail else ""
        self._event(step_context, f"Relaunching: {decision.message}{why}", live.history_metadata())
        message = error.message if error else status.message
        retry_error = SerializableErrorInfo(
            message=f"{reason}: {message}", stack=[], cls_name=str(reason)
        )
        live.own_retry_pending = True
        attempt = len(live.history.memory_tried) + 1
        return DagsterEvent.from_step(
            DagsterEventType.STEP_UP_FOR_RETRY,
            step_context,
            StepRetryData(error=retry_error),
            message=f"Relaunch, attempt {attempt}: {decision.message}",
        )

    def account_retry(
        self,
        live: StepAttempts,
        caps: Capabilities,
        step_context: IStepContext,
        retry: DagsterEvent,
    ) -> None:
        """A STEP_UP_FOR_RETRY the step process wrote itself after a preemption signal.

        With an op RetryPolicy, Dagster turns the interrupt into a policy retry; the executor
        then counts it as a relaunch so that the policy gets its budget back.
        """
        if live.cancelled:
            return
        if live.own_retry_pending:
            live.own_retry_pending = False
            return
        if not interrupted_error(retry.step_retry_data.error):
            return
        reason, detail = self._disruption(live, caps)
        decision = decide(self._settings.relaunch, live.history, reason)
        live.failed_for(reason, work_lost(retry.step_retry_data.error))
        if decision.relaunch:
            live.record_relaunch(reason, decision.memory_bytes)
            why = f" ({detail})" if detail else ""
            self._event(
                step_context, f"Relaunching: {decision.message}{why}", live.history_metadata()
            )

    def _disruption(self, live: StepAttempts, caps: Capabilities) -> tuple[FailureReason, str]:
        """What the backend says stopped the attempt (Evicted, Lost...; else Preempted), and
        its words for it (who preempted it, where known) or ""."""
        if live.attempt is not None:
            try:
                status = self._status(live)
            except BackendError:
                status = StepStatus.pending()
            reason = _infrastructure(status)
            if reason in RELAUNCH_REASONS:
                assert reason is not None
                if reason is FailureReason.PREEMPTED:
                    return reason, with_preemptor(live, caps, status.message)
                return reason, status.message
        return FailureReason.PREEMPTED, with_preemptor(live, caps, "")


def without_relaunches(args: ExecuteStepArgs, key: str, relaunches: int) -> ExecuteStepArgs:
    """The step's arguments with the executor's own relaunches taken off the retry count its
    process sees, so that they never spend the op's `RetryPolicy`."""
    known = args.known_state
    if known is None or not relaunches:
        return args
    counts = dict(known.previous_retry_attempts)
    counts[key] = max(0, counts.get(key, 0) - relaunches)
    return copy_record(args, known_state=known._replace(previous_retry_attempts=counts))


def with_preemptor(live: StepAttempts, caps: Capabilities, message: str) -> str:
    """`message` and who preempted the attempt, asked of a backend that can say it a little
    after the step said Preempted (`NamesPreemptors`), if not in it yet."""
    if caps.preemptors is None or live.attempt is None:
        return message
    try:
        who = caps.preemptors.preempted_by(live.attempt.handle)
    except BackendError:
        return message
    if not who or who in message:
        return message
    return f"{message}; {who}" if message else who


def _coming(status: StepStatus) -> FailureReason | None:
    """What a still running attempt is being disrupted by (its pod inside the grace period of
    an eviction or preemption), when the step process told of its interruption first."""
    if status.state is StepState.RUNNING and status.reason in RELAUNCH_REASONS:
        return status.reason
    return None


def _infrastructure(status: StepStatus) -> FailureReason | None:
    """The status's reason when it is one the executor relaunches for (OOM or disruption)."""
    return status.reason if status.reason in INFRASTRUCTURE else None


__all__ = ["Relaunches", "with_preemptor", "without_relaunches"]
