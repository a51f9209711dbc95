"""How long `ai_executor` waits between two passes over the event log and the running steps.

A pass reads the run's new events and each running step's state; dagster's
`StepDelegatingExecutor` sleeps a fixed time after each. Here the wait adapts: `poll_interval_s`
right after a pass that saw something happen (an event from a step, a launch, a step's log
lines), then doubling while nothing does, up to `idle_poll_interval_s`. A run of long, quiet
steps is then read about once a second, as dagster-k8s's executor does, and a busy one still
reacts within a tenth of a second.

Example:
    >>> pace = Pace(fast_s=0.1, idle_s=1.0)
    >>> [pace.next_wait() for _ in range(6)]
    [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    >>> pace.busy()
    >>> pace.next_wait()
    0.1
"""

from __future__ import annotations


class Pace:
    """The wait after each pass: `fast_s` after activity, doubling to `idle_s` without it."""

    def __init__(self, fast_s: float, idle_s: float) -> None:
        self.fast_s = fast_s
        self.idle_s = max(idle_s, fast_s)
        self._next = fast_s

    def busy(self) -> None:
        """Something happened: the next wait is the shortest again."""
        self._next = self.fast_s

    def next_wait(self) -> float:
        wait = self._next
        self._next = min(self.idle_s, round(wait * 2, 6))
        return wait


__all__ = ["Pace"]
