"""Watch one attempt of a Pipes program until it ends: Pending reasons, its node, its timeout.

Example:
    >>> from k8s_ai_orchestrator.backends.base import JobHandle, StepStatus
    >>> class RunsThenSucceeds:
    ...     answers = [StepStatus.running("node-a"), StepStatus.succeeded("node-a")]
    ...     def status(self, handle): return self.answers.pop(0)
    >>> watcher = AttemptWatcher(RunsThenSucceeds(), JobHandle("local", "1", "train"), print,
    ...                          sleep=lambda s: None)
    >>> watcher.wait(timeout_s=None).state.value
    Step 'train' is running on node-a
    'Succeeded'
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..backends.base import FailureReason, JobHandle, StepState, StepStatus
from ..errors import BackendError

Log = Callable[[str], None]


class AttemptWatcher:
    """Polls a backend for one attempt; says each new Pending reason once, and where it runs."""

    def __init__(
        self,
        backend: Any,
        handle: JobHandle,
        log: Log,
        *,
        on_poll: Callable[[], None] = lambda: None,
        poll_interval_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        where: str = "",
    ) -> None:
        self._backend = backend
        self._handle = handle
        self._log = log
        self._on_poll = on_poll  # read new messages/log lines of the attempt
        self._poll_interval_s = poll_interval_s
        self._clock = clock
        self._sleep = sleep
        self._where = where  # "local", "kubernetes tenant 'team-a'"... for messages
        self._last = StepStatus.pending()
        self._note = ""
        self._running_noted = False

    def wait(self, timeout_s: float | None) -> StepStatus:
        """The attempt's terminal status; Pending past `timeout_s` cancels it (Unschedulable)."""
        started = self._clock()
        while True:
            status = self._status()
            self._on_poll()
            if status.is_terminal:
                return status
            if status.state is StepState.PENDING:
                self._say_pending(status)
                if timeout_s is not None and self._clock() - started > timeout_s:
                    return self._give_up_pending(timeout_s)
            elif not self._running_noted:
                self._running_noted = True
                self._log(
                    f"Step '{self._handle.step_key}' is running on "
                    f"{status.node or self._handle.backend}"
                )
            self._sleep(self._poll_interval_s)

    def _status(self) -> StepStatus:
        """The attempt's status; a transient backend error keeps the last known one."""
        try:
            self._last = self._backend.status(self._handle)
        except BackendError as exc:
            if not exc.transient:
                raise
        return self._last

    def _say_pending(self, status: StepStatus) -> None:
        note = status.message or status.reason or "no reason reported yet"
        if note != self._note:
            self._note = note
            self._log(f"Step '{self._handle.step_key}' is Pending: {note}")

    def _give_up_pending(self, timeout_s: float) -> StepStatus:
        self._backend.cancel(self._handle)
        message = (
            f"step '{self._handle.step_key}' stayed Pending for more than {timeout_s:g}s on "
            f"{self._where or self._handle.backend}; last reason: {self._note or 'Pending'}. "
            "Free capacity, lower the program's size, or raise timeout=..."
        )
        return StepStatus.failed(FailureReason.UNSCHEDULABLE, message)
