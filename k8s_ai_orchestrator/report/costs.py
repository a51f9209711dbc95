"""Cost and waste over many runs, by asset, partition, tenant and day (`k8s-ai cost`).

Each finished step leaves its figures in the event log (`launch.cost`): an `ai_executor` step
in its summary engine event (`k8s_ai/cost`, `k8s_ai/waste_<cause>_cost`, the resource-seconds),
an `AICompute` program in its materialization's metadata (the same names, unprefixed). A
step's asset is what it materialized in that run, its partition the materialization's (else
the run's `dagster/partition` tag), its day the UTC date of its summary. `entries_from_events`
is pure; `load_cost_entries` reads a Dagster instance; `aggregate` and `format_table` group
and print.

Without `prices` a step has no cost, only resource-seconds: its rows show CPU-, GiB- and
GPU-hours and leave cost blank, never a made-up number.

Example:
    >>> meta = {"k8s_ai/cpu_seconds": 7200.0, "k8s_ai/cost": 0.5, "k8s_ai/currency": "USD",
    ...     "k8s_ai/waste_oom_killed_cost": 0.125, "k8s_ai/tenant": "team-a"}
    >>> events = [
    ...     LoggedEvent(86400.0, "ASSET_MATERIALIZATION", "embed", asset="embeddings",
    ...                 partition="2026-11-30"),
    ...     LoggedEvent(86400.5, "ENGINE_EVENT", "embed", "Step 'embed' reserved ...", meta)]
    >>> (entry,) = entries_from_events("r1", "daily", {}, events)
    >>> entry.asset, entry.partition, entry.day, entry.cost, entry.waste_cost["oom_killed"]
    ('embeddings', '2026-11-30', '1970-01-02', 0.5, 0.125)
    >>> print(format_table(aggregate([entry], ("asset",)), ("asset",)))  # doctest: +ELLIPSIS
    asset       currency  steps    cost  wasted  oom_killed  interrupted  gang_waiting ...
    embeddings  USD           1  0.5000  0.1250      0.1250            —             — ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dagster import DagsterEventType, DagsterInstance, RunsFilter

from ..launch.cost import CAUSES
from .model import logged_events
from .programs import is_program_summary
from .timeline import LoggedEvent

EXECUTOR_META = "k8s_ai/"  # the prefix of `ai_executor`'s engine-event metadata
PARTITION_TAG = "dagster/partition"
GROUPS = ("asset", "partition", "tenant", "day", "job", "step", "backend")  # what --by takes
NO_ASSET = "(no asset)"  # an op step, or a step that materialized nothing
# the events a step's figures and assets are in: summaries (engine events), materializations
COST_EVENT_TYPES = {DagsterEventType.ENGINE_EVENT, DagsterEventType.ASSET_MATERIALIZATION}


@dataclass(frozen=True)
class CostEntry:
    """One finished step (or `AICompute` program) of one run, with what it cost."""

    run_id: str
    job: str
    step: str  # the step key; "<step> › <program>" for an AICompute program
    asset: str  # the asset keys it materialized, "/"-joined paths, ", "-joined keys
    partition: str  # "" when unpartitioned
    tenant: str
    backend: str
    day: str  # UTC date of its summary, YYYY-MM-DD
    cpu_seconds: float = 0.0
    memory_gib_seconds: float = 0.0
    gpu_seconds: float = 0.0
    cost: float | None = None  # None: no prices were configured
    currency: str = ""
    waste_cost: Mapping[str, float] = field(default_factory=dict)  # cause → cost
    waste_cpu_seconds: Mapping[str, float] = field(default_factory=dict)  # cause → CPU-s

    def group(self, by: str) -> str:
        """The value of grouping `by` (one of `GROUPS`)."""
        return str(getattr(self, by)) or "—"


@dataclass(frozen=True)
class CostRow:
    """The entries of one group, summed."""

    key: tuple[str, ...]
    currency: str
    steps: int
    cost: float | None
    waste_cost: Mapping[str, float]
    cpu_hours: float
    memory_gib_hours: float
    gpu_hours: float

    @property
    def wasted(self) -> float | None:
        return None if self.cost is None else sum(self.waste_cost.values())


def entries_from_events(
    run_id: str, job: str, tags: Mapping[str, str], events: Sequence[LoggedEvent]
) -> list[CostEntry]:
    """The run's priced (or only measured) steps, from its events (pure)."""
    assets: dict[str, list[str]] = {}
    partitions: dict[str, str] = {}
    for event in events:
        if event.kind == "ASSET_MATERIALIZATION" and event.step_key and event.asset:
            found = assets.setdefault(event.step_key, [])
            if event.asset not in found:
                found.append(event.asset)
            partitions.setdefault(event.step_key, event.partition)
    entries = []
    for event in events:
        if not event.step_key:
            continue
        if event.kind == "ENGINE_EVENT" and EXECUTOR_META + "cpu_seconds" in event.metadata:
            meta: Mapping[str, Any] = _unprefixed(event.metadata)
            step = event.step_key
        elif event.kind == "ASSET_MATERIALIZATION" and is_program_summary(event.metadata):
            meta, step = event.metadata, f"{event.step_key} › {event.metadata['program']}"
        else:
            continue
        cost = meta.get("cost")
        entries.append(
            CostEntry(
                run_id=run_id,
                job=job,
                step=step,
                asset=", ".join(assets.get(event.step_key, ())) or NO_ASSET,
                partition=partitions.get(event.step_key) or tags.get(PARTITION_TAG, ""),
                tenant=str(meta.get("tenant", "")),
                backend=str(meta.get("backend", "")),
                day=datetime.fromtimestamp(event.timestamp, UTC).date().isoformat(),
                cpu_seconds=float(meta.get("cpu_seconds", 0.0)),
                memory_gib_seconds=float(meta.get("memory_gib_seconds", 0.0)),
                gpu_seconds=float(meta.get("gpu_seconds", 0.0)),
                cost=None if cost is None else float(cost),
                currency=str(meta.get("currency", "")),
                waste_cost={c: float(meta.get(f"waste_{c}_cost", 0.0)) for c in CAUSES},
                waste_cpu_seconds={
                    c: float(meta.get(f"waste_{c}_cpu_seconds", 0.0)) for c in CAUSES
                },
            )
        )
    return entries


def load_cost_entries(
    instance: DagsterInstance,
    since: datetime,
    until: datetime | None = None,
    job: str | None = None,
) -> list[CostEntry]:
    """The entries of every run created in [`since`, `until`) (of `job`, if given)."""
    runs = instance.get_runs(RunsFilter(job_name=job, created_after=since, created_before=until))
    entries: list[CostEntry] = []
    for run in runs:
        events = logged_events(instance, run.run_id, of_type=COST_EVENT_TYPES)
        entries += entries_from_events(run.run_id, run.job_name, run.tags, events)
    return entries


def _unprefixed(metadata: Mapping[str, Any]) -> dict[str, Any]:
    n = len(EXECUTOR_META)
    return {k[n:]: v for k, v in metadata.items() if k.startswith(EXECUTOR_META)}


def aggregate(entries: Iterable[CostEntry], by: Sequence[str]) -> list[CostRow]:
    """The entries summed per value of the `by` groupings (and currency), costliest first;
    a group whose steps had no prices has no cost. `ValueError` for an unknown grouping."""
    unknown = [g for g in by if g not in GROUPS]
    if unknown:
        raise ValueError(f"cannot group by {', '.join(unknown)}; choose from {', '.join(GROUPS)}")
    groups: dict[tuple[tuple[str, ...], str], list[CostEntry]] = {}
    for entry in entries:
        key = tuple(entry.group(g) for g in by)
        groups.setdefault((key, entry.currency), []).append(entry)
    rows = []
    for (key, currency), members in groups.items():
        priced = [m for m in members if m.cost is not None]
        rows.append(
            CostRow(
                key=key,
                currency=currency,
                steps=len(members),
                cost=sum(m.cost or 0.0 for m in priced) if priced else None,
                waste_cost={c: sum(m.waste_cost.get(c, 0.0) for m in priced) for c in CAUSES},
                cpu_hours=sum(m.cpu_seconds for m in members) / 3600,
                memory_gib_hours=sum(m.memory_gib_seconds for m in members) / 3600,
                gpu_hours=sum(m.gpu_seconds for m in members) / 3600,
            )
        )
    rows.sort(key=lambda r: (-(r.cost or 0.0), -r.gpu_hours, -r.cpu_hours, r.key))
    return rows


def format_table(rows: Sequence[CostRow], by: Sequence[str]) -> str:
    """A plain-text table of `rows`: money to 4 places as in the run report, in the row's
    currency; "—" where a cause wasted nothing or there are no prices."""
    header = [*by, "currency", "steps", "cost", "wasted", *CAUSES, "CPU-h", "GiB-h", "GPU-h"]
    lines = [header]
    for row in rows:
        lines.append(
            [
                *row.key,
                row.currency or "—",
                str(row.steps),
                _money(row.cost),
                _money(row.wasted),
                *(_money(row.waste_cost[c] if row.cost is not None else None, 0.0) for c in CAUSES),
                f"{row.cpu_hours:.2f}",
                f"{row.memory_gib_hours:.2f}",
                f"{row.gpu_hours:.2f}",
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    text = [
        "  ".join(
            cell.ljust(widths[i]) if i <= len(by) else cell.rjust(widths[i])
            for i, cell in enumerate(line)
        ).rstrip()
        for line in lines
    ]
    if all(r.cost is None for r in rows):
        text.append("(no prices in the executor config: resource-hours only, docs/cost.md)")
    return "\n".join(text)


def _money(value: float | None, blank_at: float | None = None) -> str:
    """As the run report writes money (`summary.money`): 4 places, "—" for none."""
    if value is None or (blank_at is not None and value == blank_at):
        return "—"
    return f"{value:.4f}"


__all__ = [
    "GROUPS",
    "CostEntry",
    "CostRow",
    "aggregate",
    "entries_from_events",
    "format_table",
    "load_cost_entries",
]
