"""What the executor writes to, and reads back from, a run's event log.

Engine-event metadata carries each step's infrastructure history (memory tried, preemptions,
relaunches), the job of its last launch and how much of that job's log was forwarded, so a run
worker resumed after the first one died rebuilds them (`recorded_steps`); failure events are
read to tell a preemption interrupt from a user error.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dagster import MetadataValue
from dagster._core.events import DagsterEvent, DagsterEventType, EngineEventData
from dagster._core.execution.context.system import (
    IPlanContext,
    IStepContext,
    PlanOrchestrationContext,
)
from dagster._utils.error import SerializableErrorInfo

from ..backends.base import ResourceUsage, StreamsLogs
from ..checkpoint.signals import work_lost_s
from ..errors import BackendError
from ..launch.attempts import USAGE_KEY, StepAttempts, usage_from_metadata
from ..launch.budget import Spent
from ..launch.lifecycle import Attempt
from ..launch.relaunch import StepHistory

META = "k8s_ai/"  # prefix of the engine-event metadata the executor writes
PREEMPTED_ERRORS = {"Preempted", "PreemptedRelaunch"}  # the checkpoint handle's
INTERRUPT_ERRORS = {"DagsterExecutionInterruptedError", "KeyboardInterrupt", *PREEMPTED_ERRORS}


TEMPORARY_HOME_PREFIX = ".tmp_dagster_home_"  # the folder `dagster dev` uses without DAGSTER_HOME


def temporary_instance_note(root_directory: str) -> str:
    """The run-start warning for an instance in `dagster dev`'s temporary folder ("" if not).

    Example:
        >>> temporary_instance_note("/home/me/dagster_home")
        ''
        >>> temporary_instance_note("/proj/.tmp_dagster_home_x1y2")[:60]
        'DAGSTER_HOME is not set: this instance lives in /proj/.tmp_d'
    """
    if not os.path.basename(os.path.normpath(root_directory)).startswith(TEMPORARY_HOME_PREFIX):
        return ""
    return (
        f"DAGSTER_HOME is not set: this instance lives in {root_directory}, which `dagster dev` "
        "deletes when it exits, and with it this run's events: its run report (`k8s-ai report`) "
        'and the usage history that sizes memory="auto" steps are lost. Set DAGSTER_HOME to a '
        "folder that persists"
    )


def warning_event(context: IPlanContext, message: str, meta: Mapping[str, Any]) -> DagsterEvent:
    """An engine event stored at WARNING level, so that the UI highlights it.

    `DagsterEvent.engine_event` always logs at DEBUG; this builds the same event (of the step
    when `context` is a step's, else of the run) and logs it at WARNING instead.
    """
    step = context.step if isinstance(context, IStepContext) else None
    event = DagsterEvent(
        event_type_value=DagsterEventType.ENGINE_EVENT.value,
        job_name=context.job_name,
        step_handle=step.handle if step else None,
        node_handle=step.node_handle if step else None,
        step_kind_value=step.kind.value if step else None,
        logging_tags=context.event_tags if isinstance(context, IStepContext) else {},
        event_specific_data=EngineEventData(metadata=metadata_values(meta)),
        message=message,
        pid=os.getpid(),
    )
    context.log.log_dagster_event(level=logging.WARNING, msg=message, dagster_event=event)
    return event


@dataclass
class RecordedSteps:
    """What this run's engine events recorded of its steps' attempts: the state a run worker
    resumed after the first one died starts from (see `recorded_steps`)."""

    history: dict[str, tuple[StepHistory, int | None]] = field(default_factory=dict)
    jobs: dict[str, str] = field(default_factory=dict)  # step → job of its last launch
    log_offsets: dict[str, int] = field(default_factory=dict)  # job → log bytes forwarded
    usage: dict[str, list[ResourceUsage]] = field(default_factory=dict)  # step → finished attempts
    # step → its success, failure and retry events (when they were among those read: a
    # resumed run worker reads them all)
    terminal: dict[str, int] = field(default_factory=dict)
    spent: dict[str, Spent] = field(default_factory=dict)  # step → its summary's reservation

    @classmethod
    def of(cls, events: Iterable[DagsterEvent]) -> RecordedSteps:
        """What `events` (a run's, in order) recorded; events of other kinds are passed over."""
        found = cls()
        for event in events:
            found.read(event)
        return found

    def read(self, event: DagsterEvent) -> None:
        """Take in one event (later engine events override earlier ones)."""
        key = event.step_key
        if key is not None and event.event_type in TERMINAL:
            self.terminal[key] = self.terminal.get(key, 0) + 1
        if key is None or event.event_type is not DagsterEventType.ENGINE_EVENT:
            return
        meta = event.engine_event_data.metadata
        job = meta.get(META + "job")
        if META + "log_offset" in meta and job is not None:
            self.log_offsets[str(job.value)] = int(meta[META + "log_offset"].value)  # type: ignore[arg-type]
        if is_summary(meta):  # it has ended
            cost = meta.get(META + "cost")
            gpu_hours = float(meta[META + "gpu_seconds"].value) / 3600  # type: ignore[arg-type]
            self.spent[key] = Spent(None if cost is None else float(cost.value), gpu_hours)  # type: ignore[arg-type]
        if META + "relaunches" not in meta:
            return
        if launch_record(meta):
            self.jobs[key] = str(meta[META + "job"].value)
            usage = meta.get(META + USAGE_KEY)
            self.usage[key] = usage_from_metadata(str(usage.value)) if usage is not None else []
        tried = str(meta[META + "memory_tried_bytes"].value)
        history = StepHistory(
            key,
            tuple(int(m) for m in tried.split(",") if m),
            int(meta[META + "preemptions"].value),  # type: ignore[arg-type]
            int(meta[META + "relaunches"].value),  # type: ignore[arg-type]
        )
        next_memory = int(meta[META + "next_memory_bytes"].value)  # type: ignore[arg-type]
        self.history[key] = (history, next_memory or None)

    def restore(self, live: StepAttempts) -> None:
        """Give a step's new `StepAttempts` what was recorded of its attempts so far."""
        key = live.history.step_key
        live.history, live.next_memory = self.history.get(key, (live.history, None))
        live.usage = list(self.usage.get(key, ()))


def recorded_steps(ctx: PlanOrchestrationContext | None) -> RecordedSteps:
    """Every step's history, last launched job and forwarded log, as this run's engine events
    recorded them (launches, relaunches, log forwards and summaries carry them); one read."""
    if ctx is None:
        return RecordedSteps()
    records = ctx.instance.all_logs(ctx.run_id, of_type=DagsterEventType.ENGINE_EVENT)
    return RecordedSteps.of(r.dagster_event for r in records if r.dagster_event is not None)


def is_summary(meta: Mapping[str, Any]) -> bool:
    """Whether an engine event's metadata is a step's summary (written after its last
    attempt, `attempts.StepAttempts.summary`)."""
    return META + "wall_seconds" in meta


def launch_record(meta: Mapping[str, Any]) -> bool:
    """Whether an engine event's metadata is a launch's (or a reattachment's): the step's
    history and the job it launched. A relaunch decision carries the history alone."""
    return META + "relaunches" in meta and META + "job" in meta


@dataclass(frozen=True)
class Undecided:
    """A step's last event that a run worker which died may not have acted on."""

    event: DagsterEvent  # a STEP_FAILURE, or a STEP_UP_FOR_RETRY no launch followed
    counted: bool  # a retry the executor itself wrote (its relaunch is in the history)


def undecided_steps(events: Iterable[DagsterEvent]) -> dict[str, Undecided]:
    """The steps whose last event is a failure (not known to be decided: a resumed run worker
    holds it again, as a live one does) or a retry that no launch followed (its new attempt
    is looked for, else launched)."""
    last: dict[str, Undecided] = {}
    own: set[str] = set()  # steps whose latest record is a relaunch the executor decided
    for event in events:
        key = event.step_key
        if key is None:
            continue
        meta = event.engine_event_data.metadata if event.is_engine_event else {}
        if launch_record(meta):  # a launch: everything before it was decided
            own.discard(key)
            last.pop(key, None)
        elif META + "relaunches" in meta:  # "Relaunching: ...": its retry event follows
            own.add(key)
        elif event.event_type in ATTEMPT_EVENTS:
            last[key] = Undecided(event, counted=key in own)
    return {key: u for key, u in last.items() if u.event.event_type in UNDECIDED}


ATTEMPT_EVENTS = {
    DagsterEventType.STEP_START,
    DagsterEventType.STEP_SUCCESS,
    DagsterEventType.STEP_FAILURE,
    DagsterEventType.STEP_UP_FOR_RETRY,
    DagsterEventType.STEP_RESTARTED,
}
UNDECIDED = {DagsterEventType.STEP_FAILURE, DagsterEventType.STEP_UP_FOR_RETRY}
TERMINAL = {
    DagsterEventType.STEP_SUCCESS,
    DagsterEventType.STEP_FAILURE,
    DagsterEventType.STEP_UP_FOR_RETRY,
}


def terminal_event_count(ctx: PlanOrchestrationContext | None, key: str) -> int:
    """How many success, failure and retry events the step has in the run's log."""
    if ctx is None:
        return 0
    records = ctx.instance.get_records_for_run(ctx.run_id, of_type=TERMINAL, limit=10_000)
    return sum(1 for r in records.records if r.event_log_entry.step_key == key)


def stale_note(key: str, pid: int | None) -> str:
    """What the run says of a step failure an earlier attempt's process wrote late.

    Example:
        >>> stale_note("train", 4242)
        "Ignored a failure of step 'train' written by process 4242: an earlier attempt's \
process, not the current attempt's, which runs on"
    """
    return (
        f"Ignored a failure of step '{key}' written by process {pid}: an earlier attempt's "
        "process, not the current attempt's, which runs on"
    )


def engine_event(
    step_context: IStepContext, message: str, meta: Mapping[str, Any] | None = None
) -> DagsterEvent:
    """A step's engine event (stored at DEBUG) with `meta` as `k8s_ai/` metadata."""
    metadata = metadata_values(meta or {})
    return DagsterEvent.engine_event(step_context, message, EngineEventData(metadata=metadata))


def metadata_values(meta: Mapping[str, Any]) -> dict[str, MetadataValue]:
    """Plain values as Dagster metadata, keys prefixed with `k8s_ai/`."""
    return {META + key: _metadata_value(value) for key, value in meta.items()}


def _metadata_value(value: Any) -> MetadataValue:
    if isinstance(value, bool):
        return MetadataValue.bool(value)
    if isinstance(value, int):
        return MetadataValue.int(value)
    if isinstance(value, float):
        return MetadataValue.float(value)
    return MetadataValue.text(str(value))


def interrupted(failure: DagsterEvent | None) -> bool:
    if failure is None or failure.event_type is not DagsterEventType.STEP_FAILURE:
        return False
    data = failure.step_failure_data
    return interrupted_error(data.error) or str(data.error_source) == "ErrorSource.INTERRUPT"


def interrupted_error(error: SerializableErrorInfo | None) -> bool:
    """Whether the error, or anything in its cause/context chain, is a preemption interrupt."""
    while error is not None:
        if error.cls_name in INTERRUPT_ERRORS:
            return True
        error = error.cause or error.context
    return False


def work_lost(error: SerializableErrorInfo | None) -> float | None:
    """The seconds of work a preempted step had done since its last checkpoint, as its
    `Preempted` said (`checkpoint.signals.work_lost_s`); None when nothing in the error's
    chain says it."""
    while error is not None:
        if error.cls_name in PREEMPTED_ERRORS:
            return work_lost_s(error.message)
        error = error.cause or error.context
    return None


LOG_FORWARD_MAX_CHARS = 8000  # of new log lines in one engine event


def forward_logs(
    live: StepAttempts, logs: StreamsLogs | None, ctx: IStepContext, now: float, final: bool
) -> None:
    """Write the live attempt's new log lines to the run's event log (`forward_attempt_logs`)."""
    if live.attempt is not None:
        key = live.history.step_key
        forward_attempt_logs(ctx, live.backend, key, live.attempt, logs, now, final=final)


def forward_attempt_logs(
    ctx: IStepContext,
    backend: str,
    key: str,
    attempt: Attempt,
    logs: StreamsLogs | None,
    now: float,
    *,
    final: bool,
) -> None:
    """Write an attempt's new log lines (`new_log_text`) to the run's event log, with the job
    and how far its log was read (where a resumed run worker goes on from)."""
    text = new_log_text(logs, attempt, now, ctx.run_id, final=final)
    if text:
        where = {"job": attempt.handle.job_id, "log_offset": attempt.log_offset}
        engine_event(ctx, f"[{backend} log] {key}:\n{text}", where)


def new_log_text(
    logs: StreamsLogs | None, attempt: Attempt | None, now: float, run_id: str, *, final: bool
) -> str:
    """The attempt's log lines since the last read, when a read is due (`Attempt.due_logs`:
    after 1 s, doubling to 30 s while the log is quiet; always once it ended), less the lines
    Dagster's console logger printed; "" when nothing new or no read was due. The read never
    waits for a stream (`LogTails` reads an ended attempt on until its log is complete)."""
    if logs is None or attempt is None or attempt.vanished or not attempt.due_logs(now, final):
        return ""
    try:
        text, attempt.log_offset = logs.logs_since(attempt.handle, attempt.log_offset, wait=False)
    except BackendError:
        return ""
    attempt.logs_read(bool(text))
    text = user_output(text, run_id)
    return text.rstrip("\n")[-LOG_FORWARD_MAX_CHARS:] if text.strip() else ""


def user_output(text: str, run_id: str) -> str:
    """A step's log text without the lines Dagster's console logger printed for this run.

    Those lines repeat events the step process already wrote to the run's event log; what is
    left is the step's own output (prints, library logs, tracebacks).

    Example:
        >>> log = (
        ...     "2026-12-01 04:05:28 +0000 - dagster - DEBUG - fan_out - 99825c30 - 16409 - "
        ...     "gather - STEP_START - Started execution of step 'gather'.\\n"
        ...     "loaded 3 tiles\\n"
        ... )
        >>> user_output(log, "99825c30")
        'loaded 3 tiles\\n'
    """
    marker = f" - {run_id} - "
    kept = [
        line
        for line in text.splitlines(keepends=True)
        if not (" - dagster - " in line and marker in line)
    ]
    return "".join(kept)
