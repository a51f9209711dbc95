"""The last lines of a step's log reach the run even when they come after its success.

A step process writes STEP_SUCCESS (or its own STEP_UP_FOR_RETRY) and then tears down before
its container ends: Dagster's compute-log capture copies the step's prints to the process's
stdout through a `tail -F` that can lag behind (Dagster's own notes on it: a 1 s poll,
`DAGSTER_COMPUTE_LOG_TAIL_WAIT_AFTER_FINISH`), so a print can reach the container's log only
after the run worker read the event. The step handler forwards what the log holds when the
event arrives; unless the attempt has ended and its log arrived whole, it hands the attempt to
`LogTails`, which reads its log on in the loop's passes until the backend says it ended and
its log is complete (`StreamsLogs.log_complete`: the stream's last bytes came) or until
`TAIL_S` passed, and once more at the end of the run. No read waits for a stream: at a
thousand steps ending, a pass that waited for each ended pod's last bytes would hold up every
launch behind it. A step's
last attempt is released to its backend (`Releases`: what it kept of it is let go) once its
log has been read to the end: at once, or when its tail ends.

Example:
    >>> LogTails(clock=lambda: 0.0).finish()  # nothing tailed: the run ends at once
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from dagster._core.execution.context.system import IStepContext

from ..backends.base import Backend, Capabilities, Releases, StepStatus, StreamsLogs
from ..errors import BackendError
from ..launch.attempts import StepAttempts
from ..launch.lifecycle import Attempt, read_status
from .step_events import forward_attempt_logs, forward_logs

# How long an attempt's log is read on after its step's final event while its container still
# runs (a step process exits within a second or two of it).
TAIL_S = 10.0
# At the end of the run: how often the attempts still tailed are asked whether they ended.
END_POLL_S = 0.2


@dataclass
class Tail:
    """One ended step's attempt whose container may still print."""

    key: str
    attempt: Attempt
    backend: Backend
    logs: StreamsLogs
    backend_name: str
    context: IStepContext
    until: float
    interval_s: float = 0.0  # the backend's status pace (`Capabilities.status_interval_s`)
    releases: Releases | None = None  # the step's last attempt: released when the tail ends
    stopped: bool = False  # the backend said the attempt ended: its log is read to its end


class LogTails:
    """The attempts whose log is read on after their step's final event."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tails: dict[str, Tail] = {}  # job id → tail

    def after_final(
        self,
        live: StepAttempts,
        status: StepStatus,
        backend: tuple[Backend, Capabilities],
        context: IStepContext,
    ) -> None:
        """The step wrote its final event for `live`'s attempt (`status`: the attempt's now):
        forward what its log holds and, if it still runs, read on until it ends."""
        instance, caps = backend
        attempt, logs, now = live.attempt, caps.logs, self._clock()
        if attempt is None or logs is None:
            return
        whole = status.is_terminal and logs.log_complete(attempt.handle)  # before the read
        forward_logs(live, logs, context, now, True)
        if not (attempt.vanished or whole):
            key, name = live.history.step_key, live.backend
            until, interval_s = now + TAIL_S, caps.status_interval_s
            tail = Tail(key, attempt, instance, logs, name, context, until, interval_s)
            tail.stopped = status.is_terminal
            self._tails[attempt.handle.job_id] = tail

    def release(self, attempt: Attempt, caps: Capabilities) -> None:
        """The executor is done with the step whose last attempt this is: release it to its
        backend now, or when its tail ends."""
        if caps.releases is None or attempt.vanished:
            return
        tail = self._tails.get(attempt.handle.job_id)
        if tail is not None:
            tail.releases = caps.releases
        else:
            caps.releases.release(attempt.handle)

    def forward(self) -> None:
        """One pass: forward what the tailed attempts printed; let go of those that ended whose
        log is complete, or whose `TAIL_S` passed."""
        now = self._clock()
        for job_id, tail in list(self._tails.items()):
            tail.stopped = tail.stopped or self._ended(tail, now)
            whole = tail.stopped and tail.logs.log_complete(tail.attempt.handle)  # before the read
            ended = now >= tail.until or whole
            _forward(tail, now, final=tail.stopped or ended)
            if ended:
                del self._tails[job_id]
                if tail.releases is not None:
                    tail.releases.release(tail.attempt.handle)

    def finish(self, sleep: Callable[[float], None] = time.sleep) -> None:
        """At the end of the run: wait for the tailed attempts to end (each at most until its
        `TAIL_S` passed) and forward their last lines."""
        while self._tails:
            self.forward()
            if self._tails:
                sleep(END_POLL_S)

    @staticmethod
    def _ended(tail: Tail, now: float) -> bool:
        if not tail.attempt.due(now, tail.interval_s):
            return False  # a paced backend is not asked again yet
        try:
            return read_status(tail.backend, tail.attempt).is_terminal
        except BackendError:
            return True  # the attempt cannot be read any more: read its log one last time


def _forward(tail: Tail, now: float, *, final: bool) -> None:
    attempt, logs = tail.attempt, tail.logs
    forward_attempt_logs(tail.context, tail.backend_name, tail.key, attempt, logs, now, final=final)


__all__ = ["TAIL_S", "LogTails", "Tail"]
