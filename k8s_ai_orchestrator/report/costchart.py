"""`k8s-ai cost`'s chart: per day, what the steps cost by group, and what of it was wasted.

Two panels with matplotlib (`pip install matplotlib`): stacked bars per UTC day of the cost of
each group (the costliest `TOP_GROUPS`, the rest as "other"), and per day the waste by cause.
Without prices the unit is GPU-hours when any step held GPUs, else CPU-hours, and the waste
panel shows the CPU-hours of each cause: a chart never shows money nobody priced.

Example:
    >>> entry = CostEntry("r1", "job", "embed", "embeddings", "", "team-a", "kubernetes",
    ...     "2026-12-01", cpu_seconds=3600.0, cost=2.0, currency="USD",
    ...     waste_cost={"oom_killed": 0.5})
    >>> fig = cost_figure([entry], "asset")
    >>> fig.axes[0].get_ylabel(), fig.axes[1].get_title()
    ('USD', 'wasted, by cause')
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..launch.cost import CAUSES
from .costs import CostEntry
from .model import ReportError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TOP_GROUPS = 6  # groups drawn on their own; the others are summed as "other"
CAUSE_COLORS = {
    "oom_killed": "#d62728",
    "interrupted": "#ff7f0e",
    "gang_waiting": "#8c564b",
    "quota_idle": "#7f7f7f",
    "unused_memory": "#9467bd",
}
DPI = 110


def _value(entry: CostEntry, unit: str) -> float:
    if unit == "GPU-hours":
        return entry.gpu_seconds / 3600
    if unit == "CPU-hours":
        return entry.cpu_seconds / 3600
    return entry.cost or 0.0


def _waste(entry: CostEntry, unit: str, cause: str) -> float:
    if unit in ("GPU-hours", "CPU-hours"):
        return entry.waste_cpu_seconds.get(cause, 0.0) / 3600
    return entry.waste_cost.get(cause, 0.0)


def chart_unit(entries: Sequence[CostEntry]) -> str:
    """The most used currency of the priced entries; else GPU-hours or CPU-hours."""
    currencies = Counter(e.currency for e in entries if e.cost is not None)
    if currencies:
        return currencies.most_common(1)[0][0]
    return "GPU-hours" if any(e.gpu_seconds for e in entries) else "CPU-hours"


def cost_figure(entries: Sequence[CostEntry], by: str) -> Figure:
    """The two panels for `entries`, grouped `by` one of `costs.GROUPS`."""
    try:
        from matplotlib.figure import Figure
    except ImportError as error:
        raise ReportError("the cost chart needs matplotlib: pip install matplotlib") from error
    unit = chart_unit(entries)
    money = unit not in ("GPU-hours", "CPU-hours")
    shown = [e for e in entries if not money or (e.cost is not None and e.currency == unit)]
    days = sorted({e.day for e in shown})
    totals: dict[str, float] = {}
    for entry in shown:
        totals[entry.group(by)] = totals.get(entry.group(by), 0.0) + _value(entry, unit)
    top = sorted(totals, key=lambda g: -totals[g])[:TOP_GROUPS]
    fig = Figure(figsize=(12, 4.5), dpi=DPI)
    spend, waste = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})

    def drawn_as(entry: CostEntry) -> str:
        group = entry.group(by)
        return group if group in top else "other"

    bottoms = [0.0] * len(days)
    for group in [*top, "other"]:
        heights = [
            sum(_value(e, unit) for e in shown if e.day == day and drawn_as(e) == group)
            for day in days
        ]
        if any(heights):
            spend.bar(days, heights, bottom=bottoms, label=group)
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    spend.set_title(f"{'cost' if money else unit} per day, by {by}")
    spend.set_ylabel(unit)
    bottoms = [0.0] * len(days)
    for cause in CAUSES:
        heights = [sum(_waste(e, unit, cause) for e in shown if e.day == day) for day in days]
        if any(heights):
            waste.bar(days, heights, bottom=bottoms, label=cause, color=CAUSE_COLORS[cause])
            bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    waste.set_title("wasted, by cause")
    waste.set_ylabel(unit if money else "CPU-hours")
    for axes in (spend, waste):
        if axes.get_legend_handles_labels()[0]:
            axes.legend(fontsize=8)
        axes.tick_params(axis="x", labelrotation=45, labelsize=8)
    fig.tight_layout()
    return fig


def write_cost_png(entries: Sequence[CostEntry], by: str, path: str | Path) -> Path:
    """Draw `cost_figure` into `path` (its folder created if missing)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    cost_figure(entries, by).savefig(target)
    return target


__all__ = ["chart_unit", "cost_figure", "write_cost_png"]
