"""Run report: what each step of a finished run did, read back from the run's event log.

`ai_executor` writes engine events as it launches, watches and relaunches steps (see
`step_handler.py`). This module turns a run's events into the plain dataclasses of
`timeline` — a timeline of attempts per step and the resource-seconds each step used — and
adds a row per `AICompute` program (`programs`). `summary` says what the report shows,
`html` and `png` draw it, `files` writes it; `sensor` writes it when a run ends.

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
from typing import Any, Protocol

from dagster import (
    DagsterEvent,
    DagsterEventType,
    DagsterInstance,
    MetadataValue,
)

from ..errors import OrchestratorError
from .programs import ERROR_CHAIN, program_timelines
from .timeline import (
    Attempt,
    LoggedEvent,
    Measured,
    RunReport,
    StepTimeline,
    Usage,
    measured_from,
    reasons_from,
    usage_from,
)

META = "k8s_ai/"
_RUNNING_ON = re.compile(r"^Step '.+' is running on (?P<node>.+)$")
_RUN_END_KINDS = {"RUN_SUCCESS", "RUN_FAILURE", "RUN_CANCELED"}
REPORT_TAG = "k8s_ai/report"  # run tag `run_report_sensor` sets to the report's HTML path


class _Error(Protocol):
    """What the report reads of a step failure's error (Dagster's _Error)."""

    @property
    def cls_name(self) -> str | None: ...
    @property
    def message(self) -> str: ...
    @property
    def cause(self) -> _Error | None: ...


class ReportError(OrchestratorError):
    """The report cannot be built, e.g. the run id is not in this Dagster instance."""


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
            usage = usage_from(meta, META)
            measured = measured_from(meta, META)
            reasons = reasons_from(meta, META)
        if current is None:
            continue
        _apply(current, event, _RUNNING_ON.match(message))
        if message.startswith("Relaunching:"):
            reasons = reasons_from(meta, META) or reasons
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
        reasons = reasons_from(meta, META)
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
    return RunReport(run_id, job_name, status, started, ended, _with_programs(steps, ordered))


def _with_programs(
    steps: list[StepTimeline], ordered: list[LoggedEvent]
) -> tuple[StepTimeline, ...]:
    """Each step followed by its `AICompute` programs; programs of other steps last, in order."""
    programs = program_timelines(ordered)
    rows: list[StepTimeline] = []
    for step in steps:
        rows += [step, *(p for p in programs if p.program_of == step.step_key)]
    placed = {step.step_key for step in steps}
    return (*rows, *(p for p in programs if p.program_of not in placed))


def resolve_run_id(instance: DagsterInstance, text: str) -> str:
    """The full run id for `text`: a full id, a unique prefix (`813621f2`), or "latest".

    Raises `ReportError` naming the instance when nothing, or more than one run, matches.
    """
    if text == "latest":
        runs = instance.get_runs(limit=1)
        if not runs:
            raise ReportError(f"the Dagster instance at {instance.root_directory} has no runs")
        return runs[0].run_id
    if instance.has_run(text):
        return text
    matches = [run_id for run_id in instance.get_run_ids() if run_id.startswith(text)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ReportError(
            f"run '{text}' is not in the Dagster instance at {instance.root_directory}; "
            "check the run id and that DAGSTER_HOME points at the instance that ran it"
        )
    shown = ", ".join(matches[:5])
    raise ReportError(f"run id prefix '{text}' matches {len(matches)} runs ({shown}): give more")


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
    return build_report(run.run_id, run.job_name, run.status.value, logged_events(instance, run_id))


def logged_events(
    instance: DagsterInstance, run_id: str, of_type: set[DagsterEventType] | None = None
) -> list[LoggedEvent]:
    """A run's Dagster events (those `of_type`, else all), reduced to what the reports read,
    in log order."""
    events = []
    for record in instance.all_logs(run_id, of_type=of_type):
        event = record.dagster_event
        if event is None:
            continue
        asset, partition = "", ""
        if event.is_step_materialization:
            materialization = event.step_materialization_data.materialization
            asset = "/".join(materialization.asset_key.path)
            partition = materialization.partition or ""
        events.append(
            LoggedEvent(
                timestamp=record.timestamp,
                kind=event.event_type.name,
                step_key=event.step_key,
                message=event.message or "",
                metadata=_event_metadata(event),
                asset=asset,
                partition=partition,
            )
        )
    return events


def _event_metadata(event: DagsterEvent) -> dict[str, Any]:
    """The plain metadata the report reads: engine events', materializations', failures' errors."""
    metadata: Mapping[str, MetadataValue] = {}
    if event.is_engine_event and event.engine_event_data is not None:
        metadata = event.engine_event_data.metadata
    elif event.is_step_materialization:
        metadata = event.step_materialization_data.materialization.metadata
    elif event.is_step_failure and event.step_failure_data.error is not None:
        return {ERROR_CHAIN: _error_chain(event.step_failure_data.error)}
    return {k: v.value for k, v in metadata.items()}


def _error_chain(error: _Error) -> tuple[tuple[str, str], ...]:
    """(class name, message) of an error and each of its causes, outermost first."""
    chain: list[tuple[str, str]] = []
    current: _Error | None = error
    while current is not None:
        chain.append((current.cls_name or "", current.message))
        current = current.cause
    return tuple(chain)


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
    "logged_events",
    "resolve_run_id",
]
