"""Run report: what each step of a finished run did, read back from the run's event log.

`ai_executor` writes engine events as it launches, watches and relaunches steps (see
`step_handler.py`). This module turns a run's events into plain dataclasses — a timeline of
attempts per step and the resource-seconds each step used. `summary` says what the report
shows, `html` and `png` draw it, `files` writes it; `sensor` writes it when a run ends.

Example:
    >>> from dagster import DagsterInstance
    >>> from k8s_ai_orchestrator.report.model import load_run_report
    >>> from k8s_ai_orchestrator.report.files import write_report
    >>> with DagsterInstance.get() as instance:  # doctest: +SKIP
    ...     report = load_run_report(instance, "813621f2-2ba1-45a4-bd95-400fed1bb88c")
    ...     files = write_report(report, "reports/")
    >>> files.html  # doctest: +SKIP
    PosixPath('reports/run-813621f2.html')
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dagster import (
    DagsterInstance,
    MetadataValue,
)

from ..errors import OrchestratorError

META = "k8s_ai/"
OOM = "OOMKilled"
PREEMPTION_REASONS = frozenset({"Preempted", "Evicted", "Lost"})
_RUNNING_ON = re.compile(r"^Step '.+' is running on (?P<node>.+)$")
_RUN_END_KINDS = {"RUN_SUCCESS", "RUN_FAILURE", "RUN_CANCELED"}
REPORT_TAG = "k8s_ai/report"  # run tag `run_report_sensor` sets to the report's HTML path


class ReportError(OrchestratorError):
    """The report cannot be built, e.g. the run id is not in this Dagster instance."""


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

    @property
    def cpu_hours(self) -> float:
        """CPU-hours."""
        return self.cpu_seconds / 3600

    def plus(self, other: Usage) -> Usage:
        """The sum of two usages."""
        return Usage(
            self.cpu_seconds + other.cpu_seconds,
            self.memory_gib_seconds + other.memory_gib_seconds,
            self.gpu_seconds + other.gpu_seconds,
            self.wall_seconds + other.wall_seconds,
        )


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

    @property
    def outcome(self) -> str:
        """The last attempt's outcome."""
        return self.attempts[-1].outcome if self.attempts else "not launched"

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
        >>> (report.duration_seconds, report.total_usage)
        (30.0, Usage(cpu_seconds=0.0, memory_gib_seconds=0.0, gpu_seconds=0.0, wall_seconds=0.0))
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


class _AttemptBuilder:
    """The attempt being read while walking one step's events."""

    def __init__(self, event: LoggedEvent) -> None:
        meta = event.metadata
        self.fields: dict[str, Any] = {
            "number": int(meta.get(META + "attempt", 1)),
            "backend": str(meta.get(META + "backend", "")),
            "tenant": str(meta.get(META + "tenant", "")),
            "size": str(meta.get(META + "size", "custom")),
            "cpu": float(meta.get(META + "cpu", 0.0)),
            "memory": str(meta.get(META + "memory", "")),
            "gpu": int(meta.get(META + "gpu", 0)),
            "nodes": int(meta.get(META + "nodes", 1)),
            "launched_at": event.timestamp,
        }
        self.running_at: float | None = None
        self.ended_at: float | None = None
        self.outcome: str | None = None
        self.node = ""
        self.pending_reason = ""

    def end(self, timestamp: float, outcome: str, *, override: bool = False) -> None:
        if self.ended_at is None:
            self.ended_at = timestamp
        if self.outcome is None or override:
            self.outcome = outcome

    def build(self, fallback_end: float) -> Attempt:
        return Attempt(
            **self.fields,
            running_at=self.running_at,
            ended_at=self.ended_at if self.ended_at is not None else fallback_end,
            outcome=self.outcome or "unfinished",
            node=self.node,
            pending_reason=self.pending_reason,
        )


def _step_timeline(step_key: str, events: list[LoggedEvent], run_end: float) -> StepTimeline:
    attempts: list[Attempt] = []
    current: _AttemptBuilder | None = None
    usage: Usage | None = None
    measured: Measured | None = None
    reasons: tuple[str, ...] = ()
    for event in events:
        message, meta = event.message, event.metadata
        if event.kind == "ENGINE_EVENT" and message.startswith("Launching step"):
            if current is not None:
                attempts.append(current.build(event.timestamp))
            current = _AttemptBuilder(event)
            continue
        if event.kind == "ENGINE_EVENT" and META + "cpu_seconds" in meta:
            usage = _usage(meta)
            measured = _measured(meta)
            reasons = _reasons(meta)
        if current is None:
            continue
        _apply(current, event, _RUNNING_ON.match(message))
        if message.startswith("Relaunching:"):
            reasons = _reasons(meta) or reasons
    if current is not None:
        attempts.append(current.build(run_end))
    return StepTimeline(step_key, tuple(attempts), usage, reasons, measured)


def _apply(current: _AttemptBuilder, event: LoggedEvent, running: re.Match[str] | None) -> None:
    """Fold one event into the open attempt."""
    kind, meta, ts = event.kind, event.metadata, event.timestamp
    if kind == "ENGINE_EVENT" and running is not None:
        current.running_at = current.running_at or ts
        current.node = running.group("node")
    elif kind == "ENGINE_EVENT" and " is Pending: " in event.message:
        current.pending_reason = str(meta.get(META + "reason", event.message.split(": ", 1)[1]))
    elif kind == "ENGINE_EVENT" and event.message.startswith("Relaunching:"):
        reasons = _reasons(meta)
        current.end(ts, reasons[-1] if reasons else "retried", override=True)
    elif kind == "ENGINE_EVENT" and event.message.startswith("Cancelled step"):
        current.end(ts, "cancelled")
    elif kind == "STEP_START":
        current.running_at = current.running_at or ts
    elif kind == "STEP_SUCCESS":
        current.end(ts, "succeeded")
    elif kind == "STEP_FAILURE":
        current.end(ts, "failed")
    elif kind == "STEP_UP_FOR_RETRY":
        current.end(ts, "retried")


def _usage(meta: Mapping[str, Any]) -> Usage:
    return Usage(
        cpu_seconds=float(meta.get(META + "cpu_seconds", 0.0)),
        memory_gib_seconds=float(meta.get(META + "memory_gib_seconds", 0.0)),
        gpu_seconds=float(meta.get(META + "gpu_seconds", 0.0)),
        wall_seconds=float(meta.get(META + "wall_seconds", 0.0)),
    )


def _measured(meta: Mapping[str, Any]) -> Measured | None:
    if not meta.get(META + "peak_memory_bytes") or not meta.get(META + "requested_memory_bytes"):
        return None
    return Measured(
        requested_cpu=float(meta.get(META + "requested_cpu", 0.0)),
        requested_memory_bytes=int(meta[META + "requested_memory_bytes"]),
        peak_cpu=float(meta[META + "peak_cpu"]) if META + "peak_cpu" in meta else None,
        peak_memory_bytes=int(meta[META + "peak_memory_bytes"]),
    )


def _reasons(meta: Mapping[str, Any]) -> tuple[str, ...]:
    text = str(meta.get(META + "reasons", ""))
    return tuple(r.strip() for r in text.split(",") if r.strip() and r.strip() != "none")


def build_report(
    run_id: str, job_name: str, status: str, events: Iterable[LoggedEvent]
) -> RunReport:
    """Build the report from a run's events (pure: no Dagster instance needed).

    Example:
        >>> events = [
        ...     LoggedEvent(0.0, "RUN_START", None),
        ...     LoggedEvent(0.1, "ENGINE_EVENT", "a", "Launching step 'a' on local with xs",
        ...                 {"k8s_ai/attempt": 1, "k8s_ai/memory": "2Gi"}),
        ...     LoggedEvent(1.0, "STEP_START", "a"),
        ...     LoggedEvent(3.0, "STEP_SUCCESS", "a"),
        ...     LoggedEvent(3.2, "RUN_SUCCESS", None),
        ... ]
        >>> build_report("r1", "job", "SUCCESS", events).step("a").attempts[0].running_seconds
        2.0
    """
    ordered = sorted(events, key=lambda e: e.timestamp)
    if not ordered:
        return RunReport(run_id, job_name, status, 0.0, 0.0, ())
    started = next((e.timestamp for e in ordered if e.kind == "RUN_START"), ordered[0].timestamp)
    ended = next((e.timestamp for e in ordered if e.kind in _RUN_END_KINDS), ordered[-1].timestamp)
    by_step: dict[str, list[LoggedEvent]] = {}
    for event in ordered:
        if event.step_key:
            by_step.setdefault(event.step_key, []).append(event)
    steps = [_step_timeline(key, evs, ended) for key, evs in by_step.items()]
    steps = [s for s in steps if s.attempts]
    steps.sort(key=lambda s: (s.attempts[0].launched_at, s.step_key))
    return RunReport(run_id, job_name, status, started, ended, tuple(steps))


def load_run_report(instance: DagsterInstance, run_id: str) -> RunReport:
    """Read a run's events from a Dagster instance and build its report.

    Example:
        >>> with DagsterInstance.get() as instance:  # doctest: +SKIP
        ...     load_run_report(instance, run_id).step("mosaic").attempts[0].size
        'xl'
    """
    run = instance.get_run_by_id(run_id)
    if run is None:
        raise ReportError(
            f"run '{run_id}' is not in the Dagster instance at {instance.root_directory}; "
            "check the run id and that DAGSTER_HOME points at the instance that ran it"
        )
    events = []
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is None:
            continue
        metadata: Mapping[str, MetadataValue] = {}
        if event.is_engine_event and event.engine_event_data is not None:
            metadata = event.engine_event_data.metadata
        events.append(
            LoggedEvent(
                timestamp=record.timestamp,
                kind=event.event_type.name,
                step_key=event.step_key,
                message=event.message or "",
                metadata={k: v.value for k, v in metadata.items()},
            )
        )
    return build_report(run.run_id, run.job_name, run.status.value, events)


__all__ = [
    "Attempt",
    "LoggedEvent",
    "Measured",
    "ReportError",
    "RunReport",
    "StepTimeline",
    "Usage",
    "build_report",
    "load_run_report",
]
