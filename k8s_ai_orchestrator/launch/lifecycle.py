"""One attempt's life, backend-neutral and pure: what its statuses mean and what to say of them.

`ai_executor` and `AICompute` both launch an attempt, read its status now and then, and must say
the same things of it: each new Pending reason once (a bare "starting" only once it lasts),
where it runs, each in-place growth the backend tried, and, once it has been Pending longer than
its `timeout`, that it gives up (one message, naming the knob). `Attempt.observe` turns one
status and the time into those `Note`s and a `Verdict`; the Dagster edges (the step handler,
the Pipes attempts) only turn notes into events or log lines and act on the verdict. Nothing
here reads a clock or calls a backend, except `read_status`, the one place a transient backend
error is absorbed.

Example:
    >>> from k8s_ai_orchestrator.backends.base import JobHandle, StepStatus
    >>> attempt = Attempt(JobHandle("kubernetes", "j-1", "train"), launched_at=0.0,
    ...                   where="kubernetes tenant 'team-a'", timeout_s=60)
    >>> seen = attempt.observe(StepStatus.pending("Unschedulable", "0/2 nodes"), now=1.0)
    >>> seen.verdict, [n.message for n in seen.notes]
    (<Verdict.WAIT: 'wait'>, ["Step 'train' is Pending: 0/2 nodes"])
    >>> attempt.observe(StepStatus.pending("Unschedulable", "0/2 nodes"), now=2.0).notes
    ()
    >>> late = attempt.observe(StepStatus.pending("Unschedulable", "0/2 nodes"), now=61.0)
    >>> late.verdict, late.status.reason
    (<Verdict.GIVE_UP: 'give-up'>, <FailureReason.UNSCHEDULABLE: 'Unschedulable'>)
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import (
    Backend,
    Capabilities,
    FailureReason,
    GrowOutcome,
    JobHandle,
    Resize,
    StepState,
    StepStatus,
)
from ..errors import BackendError
from ..spec import ComputeSpec, format_memory
from .plan import PlannedStep

# A step Pending with no reason yet (the backends report none while a pod is unbound or its
# containers are being created) is starting as usual, if slowly on a busy cluster (a fan-out of
# hundreds of pods takes 15-25 s to start them): said only once it lasts this long; a reason
# from the scheduler, a quota or the kubelet is said at once.
STARTING_QUIET_S = 30.0
NO_REASON = "no reason reported yet"
# When to look at an attempt again, for a backend that reports changes (`ReportsChanges`):
# a Pending one's explanation may change without a watch event (scheduler events, quota), a
# running one is looked at anyway every RUNNING_SWEEP_S (what no watch event says: a backend
# that missed one). New log lines are read after LOG_MIN_S, the wait doubling up to LOG_MAX_S
# while the log stays quiet; everything left is read when the attempt ends.
PENDING_RECHECK_S = 1.0
RUNNING_SWEEP_S = 15.0
LOG_MIN_S = 1.0
LOG_MAX_S = 30.0


class NoteKind(enum.StrEnum):
    PENDING = "pending"  # a new Pending reason
    RUNNING = "running"  # first seen running, and where
    RESIZE = "resize"  # an in-place growth the backend tried


@dataclass(frozen=True)
class Note:
    """Something to tell the user about the attempt (an engine event, a log line)."""

    kind: NoteKind
    message: str
    metadata: Mapping[str, Any] = field(default_factory=dict)


class Verdict(enum.StrEnum):
    WAIT = "wait"  # still Pending or running
    ENDED = "ended"  # the backend says it ended; `status` says how
    GIVE_UP = "give-up"  # Pending past its timeout: cancel it, it failed as `status` says


@dataclass(frozen=True)
class Observation:
    notes: tuple[Note, ...]
    verdict: Verdict
    status: StepStatus  # the backend's; for GIVE_UP, the Unschedulable failure to report


@dataclass
class Attempt:
    """One launched attempt of a step, as its observer knows it.

    `resizes_seen` counts the backend's in-place growths already turned into notes.
    """

    handle: JobHandle
    launched_at: float
    where: str = ""  # "local", "kubernetes tenant 'team-a'"... for messages
    timeout_s: float | None = None  # Pending longer than this gives up
    timeout_knob: str = "compute(timeout=...)"  # what the user raises to wait longer
    status: StepStatus = field(default_factory=StepStatus.pending)
    running_at: float | None = None
    last_note: str = ""
    resizes_seen: int = 0
    checked_at: float = float("-inf")  # when the backend was last asked (paced backends)
    next_check_at: float = float("-inf")  # when to look at it again without a change
    log_offset: int = 0  # how much of the attempt's log was forwarded
    logs_read_at: float = float("-inf")
    log_wait_s: float = LOG_MIN_S
    vanished: bool = False  # the backend has no trace of it: `status` is final, never asked

    @classmethod
    def lost(cls, handle: JobHandle, now: float, where: str, message: str) -> Attempt:
        """An attempt that a resumed run worker found no trace of: it ended Lost (relaunched
        like a preempted one, from its checkpoint)."""
        status = StepStatus.failed(FailureReason.LOST, message)
        return cls(handle, now, where, status=status, vanished=True)

    def observe(self, status: StepStatus, now: float) -> Observation:
        """What `status` at `now` says: notes to write and whether the attempt goes on."""
        self.status = status
        notes: list[Note] = []
        if status.is_terminal:
            return Observation(tuple(notes), Verdict.ENDED, status)
        if status.state is StepState.PENDING:
            note = status.message or status.waiting
            quiet = not note and now - self.launched_at < STARTING_QUIET_S
            note = note or NO_REASON
            if note != self.last_note and not quiet:
                self.last_note = note
                notes.append(
                    Note(
                        NoteKind.PENDING,
                        f"Step '{self.step_key}' is Pending: {note}",
                        {"reason": note},
                    )
                )
            if self.timeout_s is not None and now - self.launched_at > self.timeout_s:
                failed = StepStatus.failed(FailureReason.UNSCHEDULABLE, self.give_up_message())
                return Observation(tuple(notes), Verdict.GIVE_UP, failed)
        elif self.running_at is None:
            self.running_at = now
            notes.append(
                Note(
                    NoteKind.RUNNING,
                    f"Step '{self.step_key}' is running on {status.node or self.handle.backend}",
                )
            )
        return Observation(tuple(notes), Verdict.WAIT, status)

    @property
    def step_key(self) -> str:
        return self.handle.step_key

    def give_up_message(self) -> str:
        """The one Pending-timeout message, for ops and Pipes programs alike."""
        assert self.timeout_s is not None
        return (
            f"step '{self.step_key}' stayed Pending for more than {self.timeout_s:g}s on "
            f"{self.where or self.handle.backend}; last reason: {self.last_note or NO_REASON}. "
            f"Free capacity, lower its size, or raise {self.timeout_knob}"
        )

    def due_logs(self, now: float, final: bool) -> bool:
        """Whether to read the attempt's new log lines now (always once it ended); notes it."""
        if not final and now - self.logs_read_at < self.log_wait_s:
            return False
        self.logs_read_at = now
        return True

    def logs_read(self, anything_new: bool) -> None:
        """A log read found new lines (read again soon) or none (wait twice as long)."""
        self.log_wait_s = LOG_MIN_S if anything_new else min(LOG_MAX_S, self.log_wait_s * 2)

    def schedule(self, now: float, caps: Capabilities, *, measured: bool) -> None:
        """Set when to look at the attempt again if no change is reported before.

        Without a change feed (`caps.changes`), or while its memory is read to grow it
        (`measured`), every `caps.status_interval_s` (0: every pass of the loop); with one, as
        the module's constants say, the next log read included; a Pending one at the latest
        when its timeout ends.
        """
        feed, interval_s = caps.changes is not None, caps.status_interval_s
        reads_logs = caps.logs is not None
        pending = self.status.state is StepState.PENDING
        if not feed or (measured and not pending):
            wait = interval_s
        elif pending:
            wait = max(PENDING_RECHECK_S, interval_s)
        else:
            wait = max(RUNNING_SWEEP_S, interval_s)
            if reads_logs:
                wait = min(wait, self.logs_read_at + self.log_wait_s - now)
        self.next_check_at = now + max(0.0, wait)
        if self.timeout_s is not None and pending:
            deadline = self.launched_at + self.timeout_s + 0.001
            self.next_check_at = min(self.next_check_at, deadline)

    def due(self, now: float, interval_s: float) -> bool:
        """Whether a paced backend may be asked again (`PacesStatus`); notes the ask."""
        if now - self.checked_at < interval_s:
            return False
        self.checked_at = now
        return True

    def new_resizes(self, resizes: Sequence[Resize]) -> list[Resize]:
        """The growths in `resizes` (all tried so far) not seen before; marks them seen."""
        new = list(resizes[self.resizes_seen :])
        self.resizes_seen = max(self.resizes_seen, len(resizes))
        return new


def launch_note(
    step: PlannedStep,
    spec: ComputeSpec,
    attempt: int,
    job_id: str,
    sizing: str = "",
    noun: str = "step",
) -> tuple[str, dict[str, Any]]:
    """What a launch of `step` at `spec` says: where, at what size, which attempt, and
    `sizing` (how the size was chosen, or anything else to add); its metadata (the job too).
    `noun`: what is launched (an `AICompute` program says "program").

    Example:
        >>> from k8s_ai_orchestrator.spec import resolve_spec
        >>> xs = resolve_spec({"size": "xs"})
        >>> launch_note(PlannedStep("tiles", xs, "local", None), xs, 0, "4242")[0]
        "Launching step 'tiles' on local with xs: 1 CPU / 2Gi (attempt 1)"
    """
    sized = f"; {sizing}" if sizing else ""
    message = (
        f"Launching {noun} '{step.key}' on {step.where} with {spec.describe()} "
        f"(attempt {attempt + 1}){sized}"
    )
    meta = {
        "backend": step.backend,
        "tenant": step.tenant or "",
        "size": spec.size or "custom",
        "cpu": spec.cpu,
        "memory": spec.memory_quantity,
        "gpu": spec.gpu,
        "nodes": spec.nodes,
        "attempt": attempt + 1,
        "job": job_id,
    }
    return message, meta


def read_status(backend: Backend, attempt: Attempt) -> StepStatus:
    """The attempt's status from its backend; a transient backend error keeps the last one
    (and a vanished attempt its final one)."""
    if attempt.vanished:
        return attempt.status
    try:
        return backend.status(attempt.handle)
    except BackendError as exc:
        if not exc.transient:
            raise
        return attempt.status


def resize_message(key: str, resize: Resize, grow_at: float) -> str:
    """What one growth did, from what to what, and why.

    Example:
        >>> resize = Resize(256 * 1024**2, 512 * 1024**2, 230 * 1024**2, GrowOutcome.ACCEPTED)
        >>> resize_message("tiles", resize, grow_at=0.85)
        "Grew step 'tiles' in place: memory 256Mi → 512Mi (230Mi in use passed 85% of 256Mi); \
the step keeps running"
    """
    old, new = format_memory(resize.old_bytes), format_memory(resize.new_bytes)
    fallback = f"if it passes {old} it is OOMKilled and relaunched with more memory"
    if resize.new_bytes == resize.old_bytes:  # growth could not even be tried
        return f"Cannot grow step '{key}' in place: {resize.reason}; {fallback}"
    why = f"{resize.used_bytes / 1024**2:.0f}Mi in use passed {grow_at:.0%} of {old}"
    if resize.outcome is GrowOutcome.ACCEPTED:
        return f"Grew step '{key}' in place: memory {old} → {new} ({why}); the step keeps running"
    if resize.outcome is GrowOutcome.PENDING:
        return (
            f"Growing step '{key}' in place from {old} to {new} is pending ({why}): {resize.reason}"
        )
    return (
        f"Could not grow step '{key}' in place from {old} to {new} ({why}): {resize.reason}; "
        f"{fallback}"
    )


__all__ = [
    "Attempt",
    "Note",
    "NoteKind",
    "Observation",
    "Verdict",
    "launch_note",
    "read_status",
    "resize_message",
]
