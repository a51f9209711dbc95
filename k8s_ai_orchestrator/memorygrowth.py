"""Growing a running step's memory in place: when (`MemoryGrowth`) and by how much, from how
fast its memory in use rises (`MemoryTrend`). Pure; the local and Kubernetes backends feed
them their samples.

A grown limit is what the step needs for `GROW_AHEAD_S` more at the rate its memory rose over
the last `TREND_WINDOW_S`, over the growth threshold: what a steady climb reaches before the
next growth can land (the next sample, a resize, a kubelet's answer). It is at least
`MIN_STEP` × the limit (a flat step grows by a quarter, not by a few MiB that the next sample
passes again) and at most `factor` × the limit, and `max_memory`. Without a trend (less than
`MIN_SPAN_S` of samples) it is `factor` × the limit, as an OOM relaunch is.

Example:
    >>> growth = MemoryGrowth(grow_at=0.85, factor=2.0, max_memory_bytes=64 * 1024**3)
    >>> gib, mib = 1024**3, 1024**2
    >>> growth.target(4 * gib, used_bytes=int(3.5 * gib)) / gib  # no trend yet: × factor
    8.0
    >>> growth.target(4 * gib, 3.5 * gib, rate_bytes_per_s=5 * mib) / gib  # a slow climb
    5.0
    >>> round(growth.target(4 * gib, 3.5 * gib, rate_bytes_per_s=200 * mib) / gib, 2)
    6.42
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

GROW_AHEAD_S = 10.0  # a grown limit lasts this long at the current rate before it is reached
TREND_WINDOW_S = 10.0  # the rate is memory's rise over the last this many seconds ...
MIN_SPAN_S = 1.0  # ... once the samples span at least this long
MIN_STEP = 1.25  # the least a limit grows by (× the old limit)


@dataclass(frozen=True)
class MemoryGrowth:
    """When a running step's memory limit is raised in place instead of waiting for the OOM,
    and to what (see the module docstring).

    Example:
        >>> growth = MemoryGrowth(grow_at=0.85, factor=2.0, max_memory_bytes=4 * 1024**3)
        >>> growth.target(1024**3, used_bytes=900 * 1024**2) == 2 * 1024**3
        True
        >>> growth.target(1024**3, used_bytes=800 * 1024**2) is None
        True
    """

    grow_at: float  # fraction of the limit in use that triggers growth, 0 < grow_at < 1
    factor: float = 2.0  # at most old × factor (oom_escalation.factor) ...
    max_memory_bytes: int = 450 * 1024**3  # ... capped here (oom_escalation.max_memory)

    def target(
        self, limit_bytes: int, used_bytes: float, rate_bytes_per_s: float | None = None
    ) -> int | None:
        """The limit to grow to when `used_bytes` passed the threshold, else None; sized by
        the rise of memory in use (`rate_bytes_per_s`, None when not known yet).

        The answer equals `limit_bytes` when the limit is already at the cap.
        """
        if used_bytes < self.grow_at * limit_bytes:
            return None
        most = limit_bytes * self.factor
        wanted = most
        if rate_bytes_per_s is not None:
            needed = used_bytes + max(0.0, rate_bytes_per_s) * GROW_AHEAD_S
            wanted = min(most, max(needed / self.grow_at, limit_bytes * MIN_STEP))
        mib = 1024**2
        grown = int(math.ceil(wanted / mib)) * mib
        return max(limit_bytes, min(grown, self.max_memory_bytes))


@dataclass
class MemoryTrend:
    """How fast a running attempt's memory in use rises: the slope over its samples of the
    last `TREND_WINDOW_S` (bytes a second); None until they span `MIN_SPAN_S`.

    Example:
        >>> trend = MemoryTrend()
        >>> trend.add(0.0, 100)
        >>> trend.rate() is None
        True
        >>> trend.add(2.0, 300)
        >>> trend.rate()
        100.0
    """

    _samples: deque[tuple[float, float]] = field(default_factory=deque)

    def add(self, at: float, used_bytes: float) -> None:
        """One sample: memory in use at `at` (seconds, any clock the samples share)."""
        self._samples.append((at, used_bytes))
        while len(self._samples) > 2 and at - self._samples[1][0] >= TREND_WINDOW_S:
            self._samples.popleft()

    def rate(self) -> float | None:
        """Bytes a second over the window; None while the samples span too little time."""
        if len(self._samples) < 2:
            return None
        (first_at, first), (last_at, last) = self._samples[0], self._samples[-1]
        if last_at - first_at < MIN_SPAN_S:
            return None
        return (last - first) / (last_at - first_at)


__all__ = ["GROW_AHEAD_S", "MIN_STEP", "MemoryGrowth", "MemoryTrend"]
