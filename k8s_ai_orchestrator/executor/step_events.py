"""What the executor writes to, and reads back from, a run's event log.

Engine-event metadata carries each step's infrastructure history (memory tried, preemptions,
relaunches), so a restarted run coordinator can rebuild it; failure events are read to tell a
preemption interrupt from a user error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dagster import MetadataValue
from dagster._core.events import DagsterEvent, DagsterEventType
from dagster._utils.error import SerializableErrorInfo

from ..launch.relaunch import StepHistory

META = "k8s_ai/"  # prefix of the engine-event metadata the executor writes
INTERRUPT_ERRORS = {
    "DagsterExecutionInterruptedError",
    "KeyboardInterrupt",
    "Preempted",
    "PreemptedRelaunch",
}


def history_from_events(
    key: str, events: Iterable[DagsterEvent]
) -> tuple[StepHistory, int | None] | None:
    """The latest history the executor recorded for `key`, with the next attempt's memory."""
    found = None
    for event in events:
        if event.step_key != key or event.event_type is not DagsterEventType.ENGINE_EVENT:
            continue
        meta = event.engine_event_data.metadata
        if META + "relaunches" not in meta:
            continue
        tried = str(meta[META + "memory_tried_bytes"].value)
        history = StepHistory(
            key,
            tuple(int(m) for m in tried.split(",") if m),
            int(meta[META + "preemptions"].value),  # type: ignore[arg-type]
            int(meta[META + "relaunches"].value),  # type: ignore[arg-type]
        )
        next_memory = int(meta[META + "next_memory_bytes"].value)  # type: ignore[arg-type]
        found = (history, next_memory or None)
    return found


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
