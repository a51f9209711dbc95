"""Which running steps the run worker looks at in a pass: those a backend reported changed
(`ReportsChanges`, told from the backend's own threads), and those whose own timer is due
(`launch.lifecycle.Attempt.next_check_at`, set here with `arm`). Timers are kept in a heap, so
a pass costs what is due, not the number of steps in flight. Between passes the loop waits
here, woken by the first reported change.

Example:
    >>> attention = Attention(clock=lambda: 10.0)
    >>> attention.launched("job-1", "tiles")
    >>> attention.arm("tiles", 99.0)
    >>> attention.on_change("job-1")
    >>> attention.due({"tiles": None})
    (['tiles'], True)
    >>> attention.due({"tiles": None}), attention.next_due_in()
    (([], False), 89.0)
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Container

# A timer that comes due is re-armed this far ahead, in case the step is not looked at again
# (its check failed); looking at it sets its real next time.
REARM_S = 15.0


class Attention:
    """The change feed of every backend of a run, and the steps' timers."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._changed: set[str] = set()  # job ids reported, not yet looked at
        self._by_job: dict[str, str] = {}  # job id of a live attempt → its step key
        self._timers: dict[str, float] = {}  # step key → when to look at it again
        self._heap: list[tuple[float, str]] = []  # (at, key); entries not in _timers are stale

    def launched(self, job_id: str, key: str) -> None:
        """A new attempt of `key`: looked at in the next pass."""
        self._by_job[job_id] = key
        self.arm(key, float("-inf"))

    def ended(self, job_id: str) -> None:
        key = self._by_job.pop(job_id, None)
        if key is not None:
            self._timers.pop(key, None)

    def arm(self, key: str, at: float) -> None:
        """Look at `key` again at `at` (monotonic seconds) unless a change comes first."""
        if self._timers.get(key) != at:
            self._timers[key] = at
            heapq.heappush(self._heap, (at, key))

    def on_change(self, job_id: str) -> None:
        """A backend's change feed (any thread): look at that attempt at the next pass."""
        with self._lock:
            self._changed.add(job_id)
        self._wake.set()

    def due(self, running: Container[str]) -> tuple[list[str], bool]:
        """The steps of `running` to look at now (reported changed, then timers in order) and
        whether a backend reported a change since the last pass."""
        with self._lock:
            changed, self._changed = self._changed, set()
        keys = dict.fromkeys(self._by_job[job] for job in changed if job in self._by_job)
        now = self._clock()
        while self._heap and self._heap[0][0] <= now:
            at, key = heapq.heappop(self._heap)
            if self._timers.get(key) == at:
                keys[key] = None
                self.arm(key, now + REARM_S)
        return [key for key in keys if key in running], bool(changed)

    def next_due_in(self) -> float:
        """Seconds until the next timer (inf if none)."""
        while self._heap and self._timers.get(self._heap[0][1]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        if not self._heap:
            return float("inf")
        return max(0.0, self._heap[0][0] - self._clock())

    def wait(self, timeout_s: float) -> None:
        """Until a backend reports a change, at most `timeout_s`."""
        if self._wake.wait(timeout_s):
            self._wake.clear()


__all__ = ["Attention"]
