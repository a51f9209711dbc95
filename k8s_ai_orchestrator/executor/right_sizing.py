"""Right-sizing at run time, the executor's side: the sizes of a step's "auto" fields from
the usage history of earlier runs, read from the Dagster instance, at its first launch.

(In-place growth during a run is noted by the attempt's observer, `launch.lifecycle`, and
counted as the attempt's memory by `launch.attempts.StepAttempts`.)
"""

from __future__ import annotations

from typing import Any

from dagster import DagsterInstance, DagsterRun
from dagster._core.execution.context.system import PlanOrchestrationContext

from ..launch.attempts import StepAttempts
from ..launch.autosize import Sizing, size_from_history
from ..launch.settings import ExecutorSettings
from ..spec import DEFAULT_SIZE_CLASSES, ComputeSpec
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


def size_first_attempt(
    live: StepAttempts, settings: ExecutorSettings, ctx: PlanOrchestrationContext | None
) -> tuple[str, dict[str, Any]]:
    """Size the "auto" fields before the step's first attempt (`live.spec` becomes the sized
    spec); what the launch says of it and its metadata ("", {} when nothing was sized)."""
    if live.history.memory_tried or not live.spec.is_auto:
        return "", {}
    instance, run = (ctx.instance, ctx.dagster_run) if ctx else (None, None)
    sizing = sized_spec(live.history.step_key, live.spec, settings, instance, run)
    live.spec = sizing.spec
    return sizing.note, sizing.metadata or {}


__all__ = ["size_first_attempt", "sized_spec"]
