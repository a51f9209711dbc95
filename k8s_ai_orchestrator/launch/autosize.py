"""`compute(memory="auto")` / `cpu="auto"`: a step's size from its earlier runs. Pure logic.

Each finished step's summary engine event records its measured peak memory and peak CPU
(`usage_history.py` reads them back). At launch, an auto field becomes the expected peak of the
next run × `headroom`, rounded up (memory to Mi, CPU to 0.1), and kept between a floor and a
ceiling: with a size class, the class's value is the ceiling; without one, memory stops at
`oom_escalation.max_memory` and CPU at the largest size class's CPU. Without history the
declared default is used.

The expected peak of CPU is the highest of the last `AutoSizing.runs` runs. That of memory
follows the runs' trend (`trend_peak`) once `MIN_TREND_RUNS` runs recorded it: data that grows
run after run is sized for the next run's data, not the last one's (which the headroom alone
may not cover), and a step whose data shrank stops holding its old peak; with fewer runs, or
`auto_sizing.trend: false`, it is the highest peak.

Example:
    >>> spec = ComputeSpec(cpu=1, memory_bytes=4 * 1024**3, memory_auto=True)
    >>> past = [UsageRecord("0a1b2c3d-run", None, peak_memory_bytes=800 * MiB, peak_cpu=0.9)]
    >>> sizing = size_from_history("tiles", spec, past, AutoSizing(), 450 * 1024**3, 72.0)
    >>> sizing.spec.memory_quantity
    '960Mi'
    >>> sizing.note
    'memory auto: 1.2 × peak 800Mi of run 0a1b2c3d → 960Mi'
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import config_number
from ..quantities import MiB
from ..spec import ComputeSpec, format_memory

MIN_AUTO_MEMORY = 64 * MiB  # "auto" never asks for less memory than this
MIN_AUTO_CPU = 0.1  # ... nor for fewer cores
MIN_TREND_RUNS = 3  # memory follows a trend once this many runs recorded a peak


@dataclass(frozen=True)
class AutoSizing:
    """How "auto" fields are sized (executor config `auto_sizing`)."""

    headroom: float = 1.2  # the next size is the peak × headroom
    runs: int = 5  # how many earlier runs with a record of the step are read
    trend: bool = True  # memory follows its peaks' trend (False: the highest peak)

    def __post_init__(self) -> None:
        config_number(self.headroom, "auto_sizing.headroom", minimum=1)
        config_number(self.runs, "auto_sizing.runs", minimum=1, integer=True)


@dataclass(frozen=True)
class UsageRecord:
    """What one earlier run measured of a step (from its summary engine event)."""

    run_id: str
    partition: str | None  # the run's partition, None when unpartitioned
    peak_memory_bytes: int | None = None  # None: the backend does not measure memory
    peak_cpu: float | None = None  # peak cores; None: not measured


@dataclass(frozen=True)
class Sizing:
    """The spec a launch uses, what the launch event says about it, and its metadata."""

    spec: ComputeSpec
    note: str = ""  # "" when nothing was auto
    metadata: dict[str, Any] | None = None


def size_from_history(
    step_key: str,
    spec: ComputeSpec,
    records: Sequence[UsageRecord],
    policy: AutoSizing,
    max_memory_bytes: int,
    max_cpu: float,
) -> Sizing:
    """Size the auto fields of `spec` from `records` (newest first)."""
    if not spec.is_auto:
        return Sizing(spec)
    notes: list[str] = []
    meta: dict[str, Any] = {"auto_headroom": policy.headroom}
    if spec.memory_auto:
        ceiling = spec.memory_bytes if spec.size else max_memory_bytes
        used = [r for r in records if r.peak_memory_bytes]
        memory = spec.memory_bytes
        if used:
            peaks = [r.peak_memory_bytes or 0 for r in used]
            peak = max(peaks)
            expected = trend_peak(peaks) if policy.trend else None
            grown = math.ceil((expected or peak) * policy.headroom / MiB) * MiB
            memory = min(max(grown, MIN_AUTO_MEMORY), ceiling)
            meta.update(auto_peak_memory_bytes=peak, auto_memory_runs=_run_ids(used))
            basis = f"peak {_mib(peak)} of {_runs(used)}"
            if expected is not None:
                meta.update(auto_trend_memory_bytes=expected)
                basis = (
                    f"{_mib(expected)}, the trend of the peaks of {_runs(used)} "
                    f"({_mib(peaks[-1])} → {_mib(peaks[0])})"
                )
            notes.append(
                f"memory auto: {policy.headroom:g} × {basis} → "
                f"{format_memory(memory)}{_capped(memory, grown, ceiling)}"
            )
        else:
            notes.append(
                f"memory auto: no earlier run recorded '{step_key}', the default "
                f"{format_memory(memory)}"
            )
        spec = replace(spec, memory_bytes=memory)
    if spec.cpu_auto:
        cpu_ceiling = spec.cpu if spec.size else max_cpu
        measured = [r for r in records if r.peak_cpu]
        cpu = spec.cpu
        if measured:
            peak_cpu = max(r.peak_cpu or 0.0 for r in measured)
            wanted = math.ceil(peak_cpu * policy.headroom * 10 - 1e-9) / 10
            cpu = min(max(wanted, MIN_AUTO_CPU), cpu_ceiling)
            meta.update(auto_peak_cpu=peak_cpu, auto_cpu_runs=_run_ids(measured))
            notes.append(
                f"cpu auto: {policy.headroom:g} × peak {peak_cpu:g} of {_runs(measured)} → {cpu:g}"
            )
        else:
            notes.append(f"cpu auto: no earlier run recorded '{step_key}', the default {cpu:g}")
        spec = replace(spec, cpu=cpu)
    return Sizing(spec, "; ".join(notes), meta)


def trend_peak(peaks: Sequence[int]) -> int | None:
    """The next run's peak as the trend of `peaks` (newest first) says; None with fewer than
    `MIN_TREND_RUNS`.

    The least-squares line through the peaks in run order, one run ahead, plus the most any
    run rose above that line (so a flat but noisy history expects its highest peak, and a
    steady climb its next step); never less than the newest peak. (At most 1.5 × the newest
    peak: the line through three runs 0, 0, X reaches 4/3 X, and X/6 above it.)

    Example:
        >>> trend_peak([1300, 1200, 1100, 1000])  # a climb of 100 a run
        1400
        >>> trend_peak([900, 1000, 1100])  # shrinking: the newest peak
        900
        >>> trend_peak([1000, 1300, 1000])  # flat and noisy: the highest
        1300
    """
    if len(peaks) < MIN_TREND_RUNS:
        return None
    runs = list(range(len(peaks)))
    oldest_first = list(reversed(peaks))
    slope, intercept = statistics.linear_regression(runs, oldest_first)
    above = max(peak - (intercept + slope * run) for run, peak in enumerate(oldest_first))
    expected = math.ceil(intercept + slope * len(peaks) + above - 1e-6)
    return max(expected, peaks[0])


def _run_ids(records: Sequence[UsageRecord]) -> str:
    return ", ".join(r.run_id for r in records)


def _runs(records: Sequence[UsageRecord]) -> str:
    shown = ", ".join(r.run_id[:8] for r in records[:3])
    more = f" and {len(records) - 3} more" if len(records) > 3 else ""
    return f"run{'s' if len(records) > 1 else ''} {shown}{more}"


def _capped(chosen: int, wanted: int, ceiling: int) -> str:
    if chosen < wanted and chosen == ceiling:
        return f" (capped at {format_memory(ceiling)})"
    return ""


def _mib(num_bytes: int) -> str:
    return format_memory(num_bytes) if num_bytes % MiB == 0 else f"{num_bytes / MiB:.0f}Mi"


__all__ = [
    "AutoSizing",
    "MIN_AUTO_CPU",
    "MIN_AUTO_MEMORY",
    "MIN_TREND_RUNS",
    "Sizing",
    "UsageRecord",
    "size_from_history",
    "trend_peak",
]
