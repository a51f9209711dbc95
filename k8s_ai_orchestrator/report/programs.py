"""The `AICompute` programs of a run, read back from its materializations and step failures.

A Pipes program's attempts are not engine events: `pipes/attempts.py` writes its summary
(`launch.attempts.StepAttempts.summary`, plus `program` and one `attempts_usage` row per
attempt) into the completed invocation's metadata, which `get_materialize_result()` puts on the
asset's `ASSET_MATERIALIZATION` event. Each such event becomes a row `<step> › <program>`. A
program that failed leaves no summary: its row is the failure's `PipesProgramError`, with a
note saying what is missing.

Example:
    >>> meta = {"program": "embed-pipes", "backend": "local", "size": "custom", "attempts": 1,
    ...         "cpu_seconds": 2.0, "attempts_usage": [{"attempt": 1, "memory": "1Gi",
    ...         "outcome": "Succeeded", "launched_at": 10.0, "running_at": 10.5,
    ...         "ended_at": 12.0}]}
    >>> (row,) = program_timelines([LoggedEvent(12.1, "ASSET_MATERIALIZATION", "embed", "", meta)])
    >>> row.step_key, row.outcome, row.attempts[0].running_seconds, row.usage.cpu_seconds
    ('embed › embed-pipes', 'succeeded', 1.5, 2.0)
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from .timeline import Attempt, LoggedEvent, StepTimeline, measured_from, reasons_from, usage_from

SUMMARY_KEYS = ("program", "attempts_usage", "backend", "attempts")  # all present: a summary
ERROR_CHAIN = "error_chain"  # LoggedEvent metadata of STEP_FAILURE: ((class name, message), ...)
PROGRAM_ERROR = "PipesProgramError"
_PROGRAM_KEY = re.compile(r"'(?P<key>[^' ]+-pipes(?:-\d+)?)'")
_OUTCOMES = {"Succeeded": "succeeded", "Failed": "failed"}  # StepState values → report words
UNTIMED_NOTE = "attempt times not in the metadata (an older AICompute): no bars drawn"
FAILED_NOTE = (
    "program failed: AICompute writes its summary only on success, so its attempts, sizes and "
    "reserved resource-seconds are not in the event log; the step's log has each attempt"
)


def is_program_summary(metadata: Mapping[str, Any]) -> bool:
    """Whether a materialization's metadata is an `AICompute` program's summary.

    Example:
        >>> is_program_summary({"backend": "local"})
        False
    """
    return all(key in metadata for key in SUMMARY_KEYS)


def program_timelines(events: Sequence[LoggedEvent]) -> list[StepTimeline]:
    """One row per `AICompute` program of the run: its summary, or its failure.

    Example:
        >>> error = {ERROR_CHAIN: (("PipesProgramError", "step 'embed-pipes' failed: OOM"),)}
        >>> (row,) = program_timelines([LoggedEvent(3.0, "STEP_FAILURE", "embed", "", error)])
        >>> row.step_key, row.outcome, row.attempts
        ('embed › embed-pipes', 'failed', ())
    """
    rows: list[StepTimeline] = []
    for event in events:
        if not event.step_key:
            continue
        if event.kind == "ASSET_MATERIALIZATION" and is_program_summary(event.metadata):
            rows.append(_summarized(event.step_key, event))
        elif event.kind == "STEP_FAILURE":
            rows.extend(_failed(event.step_key, event.metadata.get(ERROR_CHAIN, ())))
    return rows


def _summarized(step: str, event: LoggedEvent) -> StepTimeline:
    meta = event.metadata
    attempt_rows = [row for row in meta["attempts_usage"] if isinstance(row, Mapping)]
    timed = all("launched_at" in row and "ended_at" in row for row in attempt_rows)
    attempts = tuple(_attempt(row, meta, event.timestamp, timed) for row in attempt_rows)
    return StepTimeline(
        f"{step} › {meta['program']}",
        attempts,
        usage=usage_from(meta),
        reasons=reasons_from(meta),
        measured=measured_from(meta),
        program_of=step,
        note="" if timed else UNTIMED_NOTE,
        timed=timed,
    )


def _attempt(row: Mapping[str, Any], meta: Mapping[str, Any], seen: float, timed: bool) -> Attempt:
    """One attempt row; an untimed one is placed at the materialization (`seen`), not drawn."""
    running = row.get("running_at")
    return Attempt(
        number=int(row.get("attempt", 1)),
        backend=str(meta["backend"]),
        tenant=str(meta.get("tenant", "")),
        size=str(meta.get("size", "custom")),
        cpu=float(row.get("cpu", 0.0)),
        memory=str(row.get("memory", "")),
        gpu=int(row.get("gpu", 0)),
        launched_at=float(row["launched_at"]) if timed else seen,
        running_at=float(running) if timed and running is not None else None,
        ended_at=float(row["ended_at"]) if timed else seen,
        outcome=_OUTCOMES.get(str(row.get("outcome", "")), str(row.get("outcome", "unfinished"))),
    )


def _failed(step: str, chain: Sequence[Sequence[str]]) -> list[StepTimeline]:
    for cls_name, message in chain:
        if cls_name == PROGRAM_ERROR:
            found = _PROGRAM_KEY.search(message)
            program = found.group("key") if found else "AICompute program"
            return [StepTimeline(f"{step} › {program}", (), program_of=step, note=FAILED_NOTE)]
    return []


__all__ = ["ERROR_CHAIN", "SUMMARY_KEYS", "is_program_summary", "program_timelines"]
