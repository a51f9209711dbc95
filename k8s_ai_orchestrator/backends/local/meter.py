"""What one running local attempt holds and uses: its memory limit over time, its peak memory
and its CPU time. Pure bookkeeping: the backend's monitor thread feeds it samples.

The limit can change while the attempt runs (in-place growth), so the memory it held is
integrated over time rather than taken as limit × wall time. CPU time is the sum, over every
process the tree ever had, of the last user + system seconds sampled for it; peak cores are
measured over windows of at least `CPU_WINDOW_S`. The peak memory is the highest of the
samples and of the step process's own high-water mark (which the kernel keeps: a spike between
two samples, or samples the monitor thread was too late for, still count).

Example:
    >>> meter = AttemptMeter(limit_bytes=1024**3, started_at=0.0)
    >>> meter.observe(now=1.0, memory_bytes=300 * 1024**2, cpu={(7, 0.0): 0.5})
    >>> meter.set_limit(2 * 1024**3, now=2.0)
    >>> meter.memory_byte_seconds(now=3.0) / 1024**3
    4.0
    >>> meter.peak_cpu(now=3.0), meter.max_rss
    (0.5, 314572800)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...memorygrowth import MemoryTrend
from ..base import ResourceUsage

CPU_WINDOW_S = 1.0  # peak cores are averaged over at least this long


@dataclass
class AttemptMeter:
    """Limit, peak memory and CPU of one attempt, from its start."""

    limit_bytes: int  # the memory limit enforced now
    started_at: float
    queued_s: float = 0.0  # how long it waited in the machine's line (0: adopted, not seen)
    max_rss: int = 0  # highest charged memory sampled
    _held_byte_seconds: float = 0.0  # memory held before `_limit_since`
    _limit_since: float | None = None
    _cpu_by_process: dict[tuple[int, float], float] = field(default_factory=dict)
    _window: tuple[float, float] | None = None  # (time, CPU seconds) at the window's start
    _peak_cores: float = 0.0
    trend: MemoryTrend = field(default_factory=MemoryTrend)  # how fast its memory rises

    def observe(
        self,
        now: float,
        memory_bytes: int,
        cpu: dict[tuple[int, float], float],
        high_water_bytes: int = 0,
    ) -> None:
        """Fold in one sample: the tree's charged memory, each process's CPU seconds and the
        step process's own high-water mark."""
        self.max_rss = max(self.max_rss, memory_bytes, high_water_bytes)
        self.trend.add(now, memory_bytes)
        self._cpu_by_process.update(cpu)
        used = self.cpu_seconds
        if self._window is None:
            self._window = (self.started_at, 0.0)
        since, at_start = self._window
        if now - since >= CPU_WINDOW_S:
            self._peak_cores = max(self._peak_cores, (used - at_start) / (now - since))
            self._window = (now, used)

    def set_limit(self, limit_bytes: int, now: float) -> None:
        """The limit changed at `now` (grown in place)."""
        self._held_byte_seconds = self.memory_byte_seconds(now)
        self._limit_since = now
        self.limit_bytes = limit_bytes

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds used by every process the tree had so far."""
        return sum(self._cpu_by_process.values())

    def memory_byte_seconds(self, now: float) -> float:
        """Memory held (the limit) × time, summed over every limit the attempt had."""
        since = self.started_at if self._limit_since is None else self._limit_since
        return self._held_byte_seconds + self.limit_bytes * max(now - since, 0.0)

    def peak_cpu(self, now: float) -> float:
        """Peak cores over windows of `CPU_WINDOW_S`, at least the mean over the whole attempt."""
        wall = now - self.started_at
        mean = self.cpu_seconds / wall if wall > 0 else 0.0
        return round(max(self._peak_cores, mean), 3)

    def usage(self, cpus: float, gpus: int, now: float) -> ResourceUsage:
        """The attempt's usage until `now`: `cpus` and `gpus` held, memory as metered."""
        wall = now - self.started_at
        return ResourceUsage(
            cpu_seconds=cpus * wall,
            memory_gib_seconds=self.memory_byte_seconds(now) / 1024**3,
            gpu_seconds=gpus * wall,
            wall_seconds=wall,
            max_rss_bytes=self.max_rss or None,
            nodes=("localhost",),
            cpu_used_seconds=round(self.cpu_seconds, 3),
            peak_cpu=self.peak_cpu(now),
            queued_seconds=round(max(0.0, self.queued_s), 3),
        )


__all__ = ["CPU_WINDOW_S", "AttemptMeter"]
