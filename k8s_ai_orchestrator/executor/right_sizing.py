"""Right-sizing at run time, the executor's side: sizes from history at launch, and the engine
events of in-place memory growth.

A backend that can grow a running attempt's memory (`grow_memory`, `resizes` in
`backends/base.py`) decides when with the run's `MemoryGrowth` policy; the executor writes
each growth it tried as an engine event (what, from what to what, and why) and counts the new
size as the attempt's memory, so an OOM after growth escalates from the grown size.

Example:
    >>> from k8s_ai_orchestrator.backends.base import GrowOutcome, Resize
    >>> resize = Resize(256 * 1024**2, 512 * 1024**2, 230 * 1024**2, GrowOutcome.ACCEPTED)
    >>> resize_message("tiles", resize, grow_at=0.85)
    "Grew step 'tiles' in place: memory 256Mi → 512Mi (230Mi in use passed 85% of 256Mi); \
the step keeps running"
"""

from __future__ import annotations

from typing import Any

from dagster import DagsterInstance, DagsterRun

from ..backends.base import Backend, GrowOutcome, Resize
from ..launch.attempts import StepAttempts
from ..launch.autosize import Sizing, size_from_history
from ..launch.settings import ExecutorSettings
from ..spec import DEFAULT_SIZE_CLASSES, ComputeSpec, format_memory
from .usage_history import load_usage_history


def sized_spec(
    key: str,
    spec: ComputeSpec,
    settings: ExecutorSettings,
    instance: DagsterInstance | None,
    run: DagsterRun | None,
) -> Sizing:
    """The spec of a step's first attempt: its "auto" fields sized from earlier runs."""
    if not spec.is_auto:
        return Sizing(spec)
    policy = settings.auto_sizing
    records = (
        []
        if instance is None or run is None
        else load_usage_history(instance, run, key, policy.runs)
    )
    table = settings.size_classes or DEFAULT_SIZE_CLASSES
    max_cpu = max(float(row.cpu) for row in table.values())
    max_memory = settings.relaunch.oom.max_memory_bytes
    return size_from_history(key, spec, records, policy, max_memory, max_cpu)


def new_resizes(
    key: str, live: StepAttempts, backend: Backend, grow_at: float
) -> list[tuple[str, dict[str, Any]]]:
    """The attempt's growths not yet written, as (message, metadata); accepted ones counted."""
    resizes_of = getattr(backend, "resizes", None)
    if resizes_of is None or live.handle is None:
        return []
    resizes: tuple[Resize, ...] = resizes_of(live.handle)
    events = []
    for resize in resizes[live.resizes_seen :]:
        if resize.outcome is GrowOutcome.ACCEPTED:
            live.record_resize(resize.new_bytes)
        meta = {
            **live.history_metadata(),
            "resize_outcome": resize.outcome.value,
            "resize_from": format_memory(resize.old_bytes),
            "resize_to": format_memory(resize.new_bytes),
            "resize_in_use_bytes": resize.used_bytes,
            "resize_reason": resize.reason or "none",
        }
        events.append((resize_message(key, resize, grow_at), meta))
    live.resizes_seen = len(resizes)
    return events


def resize_message(key: str, resize: Resize, grow_at: float) -> str:
    """What one growth did, from what to what, and why."""
    old, new = format_memory(resize.old_bytes), format_memory(resize.new_bytes)
    why = f"{resize.used_bytes / 1024**2:.0f}Mi in use passed {grow_at:.0%} of {old}"
    if resize.outcome is GrowOutcome.ACCEPTED:
        return f"Grew step '{key}' in place: memory {old} → {new} ({why}); the step keeps running"
    if resize.outcome is GrowOutcome.PENDING:
        return (
            f"Growing step '{key}' in place from {old} to {new} is pending ({why}): {resize.reason}"
        )
    return (
        f"Could not grow step '{key}' in place from {old} to {new} ({why}): {resize.reason}; "
        f"if it passes {old} it is OOMKilled and relaunched with more memory"
    )


__all__ = ["new_resizes", "resize_message", "sized_spec"]
