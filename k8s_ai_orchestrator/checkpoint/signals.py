"""Preemption notice for step processes: SIGTERM (Kubernetes, local) and SIGUSR2 (Slurm).

While a checkpoint handle is open in the main thread, the first such signal only records the
notice, so the step can finish its unit of work, save, and exit inside its grace period.
A second signal is passed on to whatever handler was installed before (for a Dagster step that
is Dagster's interrupt, which stops the step at once; for a plain process, termination).

Example:
    >>> watch = PreemptionWatch()
    >>> watch.notify(signal.SIGUSR2)
    >>> watch.received_name
    'SIGUSR2'
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Mapping
from types import FrameType
from typing import Any

from dagster import Failure, RetryRequested

from ..errors import CheckpointError
from ..stepenv import PREEMPTION_RELAUNCHES_LEFT

PREEMPTION_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGUSR2)
# How a `Preempted` step says what of its work is lost (the executor reads it: `work_lost_s`)
_WORK_LOST = re.compile(r"work since that checkpoint: (?P<seconds>\d+(?:\.\d+)?) s")


def work_lost_phrase(seconds: float) -> str:
    """The part of a `Preempted` description that says how much work its checkpoint lacks.

    Example:
        >>> work_lost_phrase(0.04), work_lost_s("... stopped; work since that checkpoint: 0.0 s")
        ('work since that checkpoint: 0.0 s', 0.0)
    """
    return f"work since that checkpoint: {seconds:.1f} s"


def work_lost_s(message: str) -> float | None:
    """The seconds of work a preempted step had done since its last checkpoint, as its
    `Preempted` message says (`work_lost_phrase`); None when it does not say (no checkpoint)."""
    found = _WORK_LOST.search(message)
    return float(found.group("seconds")) if found else None


class Preempted(CheckpointError, Failure):
    """The step was told it is being preempted and stopped after saving its checkpoint.

    A Dagster `Failure` with `allow_retries=False`: the step's own `RetryPolicy` is not spent;
    the backend reports the attempt as preempted and the executor relaunches the step, which
    resumes from the checkpoint.

    Example:
        >>> raise Preempted("asset mosaic got SIGTERM")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        Preempted: asset mosaic got SIGTERM
    """

    transient = True

    def __init__(self, description: str, metadata: Mapping[str, Any] | None = None) -> None:
        Failure.__init__(self, description=description, metadata=metadata, allow_retries=False)

    @classmethod
    def notice(
        cls, description: str, metadata: Mapping[str, Any] | None = None, env: Any = None
    ) -> Preempted:
        """The `Preempted` to raise in a step: one the executor relaunches while it may.

        Under `ai_executor` with preemption relaunches left, this is a `PreemptedRelaunch`,
        which Dagster records as up for retry (a relaunch in the UI, not a red failure).
        Otherwise it is a plain `Preempted`, a step failure.

        Example:
            >>> type(Preempted.notice("x got SIGTERM", env={})).__name__
            'Preempted'
            >>> left = {"K8S_AI_PREEMPTION_RELAUNCHES_LEFT": "2"}
            >>> type(Preempted.notice("x got SIGTERM", env=left)).__name__
            'PreemptedRelaunch'
        """
        source = os.environ if env is None else env
        try:
            left = int(source.get(PREEMPTION_RELAUNCHES_LEFT, "0"))
        except ValueError:
            left = 0
        if left > 0:
            return PreemptedRelaunch(description, metadata)
        return cls(description, metadata)


class PreemptedRelaunch(RetryRequested, Preempted):
    """A `Preempted` that Dagster records as STEP_UP_FOR_RETRY; the executor relaunches it.

    `ai_executor` counts that retry as a relaunch (the op's `RetryPolicy` is not spent) and
    resumes the step from its checkpoint; it hands each attempt its relaunch budget, so the
    step raises this only while a relaunch is allowed.
    """

    def __init__(self, description: str, metadata: Mapping[str, Any] | None = None) -> None:
        Preempted.__init__(self, description, metadata)
        self.max_retries = _UNBOUNDED_RETRIES  # the executor holds the budget, not Dagster
        self.seconds_to_wait = 0


_UNBOUNDED_RETRIES = 2**31 - 1


class PreemptionWatch:
    """Remembers whether this process was told it is being preempted."""

    def __init__(self) -> None:
        self._received: int | None = None
        self._previous: dict[int, Any] = {}
        self._users = 0
        self._lock = threading.Lock()

    @property
    def received(self) -> int | None:
        """The first preemption signal number received, or None."""
        return self._received

    @property
    def received_name(self) -> str | None:
        return None if self._received is None else signal.Signals(self._received).name

    def notify(self, signum: int) -> None:
        """Record a preemption notice (what the signal handler does on the first signal)."""
        if self._received is None:
            self._received = signum

    def acquire(self) -> bool:
        """Install the handlers unless they are in place; False outside the main thread."""
        if threading.current_thread() is not threading.main_thread():
            return False
        with self._lock:
            self._users += 1
            for sig in PREEMPTION_SIGNALS:
                current = signal.getsignal(sig)
                if current != self._handle:  # first user, or someone replaced ours since
                    self._previous[sig] = current
                    signal.signal(sig, self._handle)
        return True

    def release(self) -> None:
        """Give back the handlers when the last user leaves, unless someone replaced them."""
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users > 0:
                return
            for sig, previous in self._previous.items():
                if signal.getsignal(sig) == self._handle:
                    signal.signal(sig, previous)
            self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self._received is None:
            self._received = signum
            return
        previous = self._previous.get(signum) or signal.SIG_DFL
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)


PROCESS_WATCH = PreemptionWatch()
"""The watch shared by every handle in this process."""
