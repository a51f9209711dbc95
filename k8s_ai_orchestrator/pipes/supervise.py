"""Watch one attempt of a Pipes program until it ends: poll its backend, log what its observer
notes (each new Pending reason once, where it runs, each in-place growth), give up on it once
it has been Pending past its timeout (`launch.lifecycle`, the same rules as `ai_executor`).

Example:
    >>> from k8s_ai_orchestrator.backends.base import JobHandle, StepStatus
    >>> class RunsThenSucceeds:
    ...     answers = [StepStatus.running("node-a"), StepStatus.succeeded("node-a")]
    ...     def status(self, handle): return self.answers.pop(0)
    >>> attempt = Attempt(JobHandle("local", "1", "train"), launched_at=0.0)
    >>> AttemptWatcher(RunsThenSucceeds(), attempt, print, sleep=lambda s: None).wait().state.value
    Step 'train' is running on node-a
    'Succeeded'
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..backends.base import StepStatus
from ..launch.lifecycle import Attempt, Observation, Verdict, read_status

Log = Callable[[str], None]
Observe = Callable[[StepStatus, float], Observation]


class AttemptWatcher:
    """Polls a backend for one attempt and logs what its observer notes."""

    def __init__(
        self,
        backend: Any,
        attempt: Attempt,
        log: Log,
        *,
        observe: Observe | None = None,
        on_poll: Callable[[], None] = lambda: None,
        poll_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._backend = backend
        self._attempt = attempt
        self._log = log
        self._observe = observe or attempt.observe  # the step's, to note its growths too
        self._on_poll = on_poll  # read new messages/log lines of the attempt
        self._poll_interval_s = poll_interval_s
        self._clock = clock
        self._sleep = sleep

    def wait(self) -> StepStatus:
        """The attempt's terminal status; Pending past its timeout cancels it (Unschedulable)."""
        while True:
            status = read_status(self._backend, self._attempt)
            self._on_poll()
            seen = self._observe(status, self._clock())
            for note in seen.notes:
                self._log(note.message)
            if seen.verdict is Verdict.GIVE_UP:
                self._backend.cancel(self._attempt.handle)
            if seen.verdict is not Verdict.WAIT:
                return seen.status
            self._sleep(self._poll_interval_s)
