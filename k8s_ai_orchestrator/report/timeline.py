"""The report's values: a run's steps, their attempts and resource use, as plain dataclasses.

`model` builds them from a run's event log (`programs` adds the `AICompute` programs);
`summary` reads them. Pure: nothing here touches Dagster.

Example:
    >>> step = StepTimeline("mosaic", attempts=())
    >>> step.outcome
    'not launched'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..launch.cost import CAUSES

OOM = "OOMKilled"
PREEMPTION_REASONS = frozenset({"Preempted", "Evicted", "Lost"})


@dataclass(frozen=True)
class LoggedEvent:
    """One event of the run's log, reduced to what the report reads.

    Example:
        >>> LoggedEvent(12.5, "STEP_START", "mosaic", "Started execution of step").kind
        'STEP_START'
    """

    timestamp: float  # seconds since the epoch
    kind: str  # DagsterEventType name: STEP_START, ENGINE_EVENT, RUN_SUCCESS, ...
    step_key: str | None  # None for run-level events
    message: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)  # plain values, keys as logged
    asset: str = ""  # a materialization's asset key, its path "/"-joined
    partition: str = ""  # a materialization's partition, "" when unpartitioned


@dataclass(frozen=True)
class Attempt:
    """One launch of a step on a backend, from launch to its end.

    Example:
        >>> a = Attempt(1, "local", "", "xl", 72.0, "450Gi", 0, 0.0, 2.0, 9.0, OOM)
        >>> (a.pending_seconds, a.running_seconds, a.oom_killed)
        (2.0, 7.0, True)
    """

    number: int  # 1-based, as in "(attempt N)"
    backend: str  # local | kubernetes | slurm
    tenant: str  # "" when no tenant applies
    size: str  # size class name, or "custom"
    cpu: float
    memory: str  # Kubernetes quantity this attempt got, e.g. "512Mi"
    gpu: int
    launched_at: float  # when the executor submitted it
    running_at: float | None  # when it left Pending; None if it never ran
    ended_at: float
    outcome: str  # succeeded | failed | cancelled | unfinished | retried | a relaunch reason
    node: str = ""  # where it ran, when the backend said
    pending_reason: str = ""  # the last reason it was Pending, "" if it never waited
    nodes: int = 1  # nodes of a multi-node (gang) step; cpu/memory/gpu are per task

    @property
    def pending_seconds(self) -> float:
        """Seconds between submission and the start of running (all of it if it never ran)."""
        return (self.running_at or self.ended_at) - self.launched_at

    @property
    def running_seconds(self) -> float:
        """Seconds it ran; 0 if it never left Pending."""
        return 0.0 if self.running_at is None else self.ended_at - self.running_at

    @property
    def oom_killed(self) -> bool:
        """Whether this attempt ended OOMKilled (and the next one got more memory)."""
        return self.outcome == OOM

    @property
    def preempted(self) -> bool:
        """Whether this attempt was preempted, evicted or lost its node."""
        return self.outcome in PREEMPTION_REASONS


@dataclass(frozen=True)
class Usage:
    """Resource-seconds as the backend accounted them (requested size × time held).

    Example:
        >>> Usage(cpu_seconds=7200.0).cpu_hours
        2.0
    """

    cpu_seconds: float = 0.0
    memory_gib_seconds: float = 0.0
    gpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    cost: float | None = None  # at the executor's `prices` (docs/cost.md); None: no prices
    # the part of `cost` wasted by OOM kills, interruptions and memory reserved but unused
    wasted: float | None = None
    currency: str = ""

    @property
    def cpu_hours(self) -> float:
        """CPU-hours."""
        return self.cpu_seconds / 3600

    def plus(self, other: Usage) -> Usage:
        """The sum of two usages (a cost only where both, or either alone, have one)."""
        return Usage(
            self.cpu_seconds + other.cpu_seconds,
            self.memory_gib_seconds + other.memory_gib_seconds,
            self.gpu_seconds + other.gpu_seconds,
            self.wall_seconds + other.wall_seconds,
            _sum(self.cost, other.cost),
            _sum(self.wasted, other.wasted),
            self.currency or other.currency,
        )


def _sum(a: float | None, b: float | None) -> float | None:
    return None if a is None and b is None else (a or 0.0) + (b or 0.0)


@dataclass(frozen=True)
class Measured:
    """What a step was given at its end against what it used at its peak (backend-measured).

    Example:
        >>> Measured(2.0, 4 * 1024**3, 0.5, 1024**3).memory_share
        0.25
    """

    requested_cpu: float
    requested_memory_bytes: int  # the last attempt's memory, after any in-place growth
    peak_cpu: float | None  # peak cores in use; None when not measured (Slurm)
    peak_memory_bytes: int  # peak resident memory over all attempts

    @property
    def memory_share(self) -> float:
        """Peak memory over requested memory."""
        return self.peak_memory_bytes / self.requested_memory_bytes

    @property
    def cpu_share(self) -> float:
        """Peak cores over requested cores."""
        if self.peak_cpu is None or not self.requested_cpu:
            return 0.0
        return self.peak_cpu / self.requested_cpu


@dataclass(frozen=True)
class StepTimeline:
    """Every attempt of one step, and the summary the executor wrote after the last one.

    Example:
        >>> step = StepTimeline("mosaic", attempts=())
        >>> (step.outcome, step.relaunches)
        ('not launched', 0)
    """

    step_key: str
    attempts: tuple[Attempt, ...]
    usage: Usage | None = None  # None when the executor wrote no summary (run cut short)
    reasons: tuple[str, ...] = ()  # relaunch/failure reasons in order, e.g. ("OOMKilled",)
    measured: Measured | None = None  # None when the backend measured nothing (or no summary)
    program_of: str = ""  # for an `AICompute` program's row: the step that ran it; "" for a step
    note: str = ""  # what the row cannot show, e.g. a failed program's missing summary
    timed: bool = True  # False when the attempts' times were not recorded: no bars are drawn

    @property
    def outcome(self) -> str:
        """The last attempt's outcome ("failed" for a failed program with no summary)."""
        if self.attempts:
            return self.attempts[-1].outcome
        return "failed" if self.program_of else "not launched"

    @property
    def started_at(self) -> float | None:
        """When its first attempt was launched; None when no attempt has a recorded time."""
        return self.attempts[0].launched_at if self.attempts and self.timed else None

    @property
    def relaunches(self) -> int:
        """How many times the executor launched the step again."""
        return max(0, len(self.attempts) - 1)

    @property
    def memory_tried(self) -> tuple[str, ...]:
        """The memory of each attempt in order, e.g. ("256Mi", "512Mi", "1Gi")."""
        return tuple(a.memory for a in self.attempts)

    @property
    def seconds_lost(self) -> float:
        """Wall seconds of attempts that did not end the step (OOM, preemption, retries)."""
        return sum(a.ended_at - a.launched_at for a in self.attempts[:-1])


@dataclass(frozen=True)
class RunReport:
    """A finished (or stopped) run: its steps' timelines and their resource use.

    Example:
        >>> report = RunReport("813621f2", "vegetation_risk", "SUCCESS", 0.0, 30.0, steps=())
        >>> (report.duration_seconds, report.total_usage.cpu_seconds)
        (30.0, 0.0)
    """

    run_id: str
    job_name: str
    status: str  # DagsterRunStatus value: SUCCESS, FAILURE, CANCELED, STARTED, ...
    started_at: float
    ended_at: float
    steps: tuple[StepTimeline, ...]

    @property
    def duration_seconds(self) -> float:
        """Seconds from the run's start to its end."""
        return self.ended_at - self.started_at

    @property
    def total_usage(self) -> Usage:
        """The sum of every step's usage."""
        total = Usage()
        for step in self.steps:
            total = total.plus(step.usage or Usage())
        return total

    def step(self, step_key: str) -> StepTimeline:
        """The timeline of one step; `KeyError` if the run has no such step."""
        for step in self.steps:
            if step.step_key == step_key:
                return step
        raise KeyError(step_key)


def usage_from(meta: Mapping[str, Any], prefix: str = "") -> Usage:
    """The `Usage` in a summary's metadata (`prefix` is `k8s_ai/` on the executor's events)."""
    cost = meta.get(prefix + "cost")
    wasted = [meta.get(prefix + f"waste_{cause}_cost") for cause in CAUSES]
    return Usage(
        cpu_seconds=float(meta.get(prefix + "cpu_seconds", 0.0)),
        memory_gib_seconds=float(meta.get(prefix + "memory_gib_seconds", 0.0)),
        gpu_seconds=float(meta.get(prefix + "gpu_seconds", 0.0)),
        wall_seconds=float(meta.get(prefix + "wall_seconds", 0.0)),
        cost=None if cost is None else float(cost),
        wasted=None if cost is None else sum(float(w or 0.0) for w in wasted),
        currency=str(meta.get(prefix + "currency", "")),
    )


def measured_from(meta: Mapping[str, Any], prefix: str = "") -> Measured | None:
    """The `Measured` in a summary's metadata; None when the backend measured no memory."""
    if not meta.get(prefix + "peak_memory_bytes") or not meta.get(
        prefix + "requested_memory_bytes"
    ):
        return None
    return Measured(
        requested_cpu=float(meta.get(prefix + "requested_cpu", 0.0)),
        requested_memory_bytes=int(meta[prefix + "requested_memory_bytes"]),
        peak_cpu=float(meta[prefix + "peak_cpu"]) if prefix + "peak_cpu" in meta else None,
        peak_memory_bytes=int(meta[prefix + "peak_memory_bytes"]),
    )


def reasons_from(meta: Mapping[str, Any], prefix: str = "") -> tuple[str, ...]:
    """The relaunch/failure reasons of a summary's metadata, in order."""
    text = str(meta.get(prefix + "reasons", ""))
    return tuple(r.strip() for r in text.split(",") if r.strip() and r.strip() != "none")


__all__ = [
    "OOM",
    "PREEMPTION_REASONS",
    "Attempt",
    "LoggedEvent",
    "Measured",
    "RunReport",
    "StepTimeline",
    "Usage",
    "measured_from",
    "reasons_from",
    "usage_from",
]
