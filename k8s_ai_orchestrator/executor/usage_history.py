"""A step's measured use in earlier runs, read back from the Dagster instance.

Where it is kept: the step's summary engine event (written after its last attempt, see
`attempts.StepAttempts.summary`) carries `k8s_ai/peak_memory_bytes` and `k8s_ai/peak_cpu`.
A step is found again by its job name and step key (an asset's step key is its asset key),
and by the run's partition (`dagster/partition` tag): runs of the same partition first, and
when the partition has none yet, runs of any partition.

Example:
    >>> from dagster import DagsterInstance
    >>> with DagsterInstance.get() as instance:  # doctest: +SKIP
    ...     load_usage_history(instance, run, "tiles", runs=5)[0].peak_memory_bytes
    891289600
"""

from __future__ import annotations

from dagster import DagsterInstance, DagsterRun, RunsFilter
from dagster._core.events import DagsterEventType

from ..launch.autosize import UsageRecord
from .step_events import META

PARTITION_TAG = "dagster/partition"
RUNS_READ_PER_RECORD = 4  # runs read for each record wanted (runs may lack the step)


def load_usage_history(
    instance: DagsterInstance, run: DagsterRun, step_key: str, runs: int
) -> list[UsageRecord]:
    """Up to `runs` records of `step_key` from earlier runs of `run`'s job, newest first."""
    partition = run.tags.get(PARTITION_TAG)
    found = _records(instance, run, step_key, runs, partition)
    if not found and partition is not None:
        found = _records(instance, run, step_key, runs, None)
    return found


def _records(
    instance: DagsterInstance, run: DagsterRun, step_key: str, runs: int, partition: str | None
) -> list[UsageRecord]:
    tags = {PARTITION_TAG: partition} if partition is not None else None
    earlier = instance.get_runs(
        RunsFilter(job_name=run.job_name, tags=tags), limit=runs * RUNS_READ_PER_RECORD + 1
    )
    found: list[UsageRecord] = []
    for past in earlier:
        if past.run_id == run.run_id:
            continue
        record = _step_record(instance, past, step_key)
        if record is not None:
            found.append(record)
        if len(found) >= runs:
            break
    return found


def _step_record(instance: DagsterInstance, run: DagsterRun, step_key: str) -> UsageRecord | None:
    """The last summary of `step_key` in `run` that carries measured use, if any."""
    record = None
    for entry in instance.all_logs(run.run_id, of_type=DagsterEventType.ENGINE_EVENT):
        event = entry.dagster_event
        if event is None or event.step_key != step_key:
            continue
        meta = event.engine_event_data.metadata
        if META + "peak_memory_bytes" not in meta:
            continue
        peak_memory = int(meta[META + "peak_memory_bytes"].value)  # type: ignore[arg-type]
        cpu = meta.get(META + "peak_cpu")
        peak_cpu = float(cpu.value) if cpu is not None else 0.0  # type: ignore[arg-type]
        record = UsageRecord(
            run.run_id, run.tags.get(PARTITION_TAG), peak_memory or None, peak_cpu or None
        )
    return record


def load_step_walls(
    instance: DagsterInstance, run: DagsterRun, runs: int
) -> dict[str, list[tuple[str, float]]]:
    """Step key → (run id, seconds its size was held in that run, all attempts), over the
    last `runs` earlier runs of `run`'s job that have summaries, newest first: what a budget's
    estimate reads (`launch.budget.estimate`). One read of each run's engine events."""
    walls: dict[str, list[tuple[str, float]]] = {}
    earlier = instance.get_runs(
        RunsFilter(job_name=run.job_name), limit=runs * RUNS_READ_PER_RECORD + 1
    )
    counted = 0
    for past in earlier:
        if counted >= runs:
            break
        if past.run_id == run.run_id:
            continue
        found = False
        for entry in instance.all_logs(past.run_id, of_type=DagsterEventType.ENGINE_EVENT):
            event = entry.dagster_event
            wall = event.engine_event_data.metadata.get(META + "wall_seconds") if event else None
            if event is not None and event.step_key and wall is not None:
                walls.setdefault(event.step_key, []).append((past.run_id, float(wall.value)))  # type: ignore[arg-type]
                found = True
        counted += found
    return walls


__all__ = ["PARTITION_TAG", "load_step_walls", "load_usage_history"]
