"""What a run report says, computed once: both renderers (`html`, `png`) draw these objects.

A `ReportSummary` holds every word and number the report shows — title, subtitle, summary
cards, colour legend, one timeline row per step with a bar per attempt, and the per-step
table — so the HTML page and the PNG cannot tell different stories.

Example:
    >>> from k8s_ai_orchestrator.report.model import RunReport
    >>> summary = summarize(RunReport("813621f2", "job", "SUCCESS", 0.0, 1.0, steps=()))
    >>> [(card.label, card.value) for card in summary.cards][:2]
    [('status', 'SUCCESS'), ('duration', '1.0 s')]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..spec import format_memory
from .model import Attempt, Measured, RunReport, StepTimeline, Usage

COLORS = {
    "succeeded": "#2e9d5b",
    "OOMKilled": "#d64545",
    "Preempted": "#e58e26",
    "Evicted": "#e58e26",
    "Lost": "#e58e26",
    "failed": "#8b1e1e",
    "retried": "#7d7fa6",
    "cancelled": "#9a9a9a",
    "unfinished": "#5b8def",
}
OTHER_COLOR = "#8b1e1e"  # any other relaunch reason: drawn, and keyed, like "failed"
PENDING_COLOR = "#d5dbe3"
USAGE_BAR_COLOR = "#cfe3f7"  # the CPU-s cell's share-of-the-largest bar
_ALWAYS_KEYED = (
    ("succeeded", COLORS["succeeded"]),
    ("OOMKilled", COLORS["OOMKilled"]),
    ("Preempted / Evicted / Lost", COLORS["Preempted"]),
    ("failed", COLORS["failed"]),
    ("retried", COLORS["retried"]),
)
_KEYED_WHEN_SEEN = ("cancelled", "unfinished")  # keyed only when an attempt ended so
COLUMNS = (
    "step",
    "backend",
    "node",
    "size",
    "attempts",
    "memory",
    "requested",
    "peak used",
    "reasons",
    "reserved CPU-s",
    "reserved GiB-s",
    "reserved GPU-s",
    "cost",
    "wasted",
    "s lost",
    "outcome",
)
CPU_COLUMN = COLUMNS.index("reserved CPU-s")
SUBTITLE = (
    "steps launched by ai_executor and AICompute programs (step › program); reserved "
    "resource-seconds are the size each attempt held × the time it held it; peak used is what "
    "the backend measured"
)
OVERSIZED_BELOW = 0.5  # a step whose peak memory is under this share of its request is over-sized


@dataclass(frozen=True)
class Card:
    """One summary card on top of the report: a big value over a small label.

    Example:
        >>> Card("OOM kills", "2").label
        'OOM kills'
    """

    label: str
    value: str


@dataclass(frozen=True)
class LegendEntry:
    """One colour of the timeline and what it means.

    Example:
        >>> LegendEntry("pending", PENDING_COLOR).color
        '#d5dbe3'
    """

    label: str
    color: str  # "#rrggbb"


@dataclass(frozen=True)
class AttemptBar:
    """One attempt on the timeline, in seconds since the run started.

    Example:
        >>> bar = AttemptBar("a", 1, 0.0, 2.0, 9.0, "#d64545", "#1 256Mi", "✕ OOM", "...")
        >>> (bar.pending_seconds, bar.running_seconds)
        (2.0, 7.0)
    """

    outcome: str
    number: int
    launched: float  # the grey, Pending part runs from here ...
    running: float  # ... to here; the coloured part from here ...
    ended: float  # ... to here
    color: str  # the colour of its outcome
    label: str  # drawn inside the bar when it fits: "#2 512Mi"
    mark: str  # drawn above its end when the executor relaunched it: "✕ OOM", or ""
    detail: str  # node, Pending reason and seconds (the HTML's hover text)

    @property
    def pending_seconds(self) -> float:
        """Length of the grey part."""
        return self.running - self.launched

    @property
    def running_seconds(self) -> float:
        """Length of the coloured part."""
        return self.ended - self.running


@dataclass(frozen=True)
class TimelineRow:
    """One step's row of the timeline.

    Example:
        >>> TimelineRow("mosaic", "local · xl: 72 CPU / 450Gi", bars=()).step_key
        'mosaic'
    """

    step_key: str
    caption: str  # backend · size of its first attempt
    bars: tuple[AttemptBar, ...]


@dataclass(frozen=True)
class TableRow:
    """One step's row of the table: a cell per `COLUMNS` entry.

    Example:
        >>> TableRow(("mosaic",) * len(COLUMNS), cpu_share=0.5).cells[0]
        'mosaic'
    """

    cells: tuple[str, ...]
    cpu_share: float  # its CPU-seconds over the largest step's, 0..1, drawn behind reserved CPU-s


@dataclass(frozen=True)
class ReportSummary:
    """Everything the report shows, in the order it shows it.

    Example:
        >>> from k8s_ai_orchestrator.report.model import RunReport
        >>> summarize(RunReport("813621f2-2ba1", "job", "SUCCESS", 0.0, 1.0, ())).title
        'Run 813621f2 · job'
    """

    title: str
    subtitle: str
    cards: tuple[Card, ...]
    legend: tuple[LegendEntry, ...]
    span: float  # seconds the timeline's axis covers (the run's duration, at least 1)
    ticks: tuple[float, ...]  # the timeline's axis ticks, seconds since the run started
    timeline: tuple[TimelineRow, ...]
    columns: tuple[str, ...]
    rows: tuple[TableRow, ...]

    def texts(self) -> tuple[str, ...]:
        """Every text a renderer must show: title, cards, legend, step rows, marks, table.

        Bar labels ("#2 512Mi") are left out: a renderer draws them only where they fit.
        """
        marks = [bar.mark for row in self.timeline for bar in row.bars if bar.mark]
        return (
            self.title,
            self.subtitle,
            *(text for card in self.cards for text in (card.value, card.label)),
            *(entry.label for entry in self.legend),
            *(text for row in self.timeline for text in (row.step_key, row.caption)),
            *marks,
            *self.columns,
            *(cell for row in self.rows for cell in row.cells),
        )


def color_of(outcome: str) -> str:
    """The bar colour of an attempt's outcome.

    Example:
        >>> color_of("OOMKilled")
        '#d64545'
    """
    return COLORS.get(outcome, OTHER_COLOR)


def mark_of(attempt: Attempt) -> str:
    """The mark drawn at the end of an attempt that was relaunched: "✕ OOM", "✕ preempted", ...

    Example:
        >>> mark_of(Attempt(1, "local", "", "xs", 1.0, "2Gi", 0, 0.0, 1.0, 2.0, "OOMKilled"))
        '✕ OOM'
    """
    if attempt.oom_killed:
        return "✕ OOM"
    if attempt.preempted:
        return f"✕ {attempt.outcome.lower()}"
    return ""


def size_text(attempt: Attempt) -> str:
    """The size an attempt asked for, e.g. "xl: 72 CPU / 450Gi" or "2 nodes × (8 CPU / 64Gi)".

    Example:
        >>> size_text(Attempt(1, "local", "", "xs", 1.0, "2Gi", 0, 0.0, 1.0, 2.0, "succeeded"))
        'xs: 1 CPU / 2Gi'
    """
    text = f"{attempt.cpu:g} CPU / {attempt.memory}"
    text += f" / {attempt.gpu} GPU" if attempt.gpu else ""
    text = f"{attempt.nodes} nodes × ({text})" if attempt.nodes > 1 else text
    return text if attempt.size == "custom" else f"{attempt.size}: {text}"


def axis_ticks(span: float) -> tuple[float, ...]:
    """Round ticks from 0 to `span` seconds, about eight of them.

    Example:
        >>> axis_ticks(9.0)
        (0.0, 2.0, 4.0, 6.0, 8.0)
    """
    raw = max(span, 1e-9) / 8
    magnitude = 10 ** math.floor(math.log10(raw))
    step = float(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw))
    return tuple(n * step for n in range(int(span / step + 1e-9) + 1))


def summarize(report: RunReport) -> ReportSummary:
    """Compute what the report of `report` says.

    Example:
        >>> from k8s_ai_orchestrator.report.model import RunReport
        >>> summarize(RunReport("813621f2", "job", "SUCCESS", 0.0, 1.0, steps=())).columns[-1]
        'outcome'
    """
    max_cpu = max((s.usage.cpu_seconds for s in report.steps if s.usage), default=0.0)
    span = max(report.duration_seconds, 1.0)
    return ReportSummary(
        title=f"Run {report.run_id[:8]} · {report.job_name}",
        subtitle=f"run {report.run_id} — {SUBTITLE}",
        cards=_cards(report),
        legend=_legend(report),
        span=span,
        ticks=axis_ticks(span),
        timeline=tuple(_timeline_row(step, report.started_at) for step in report.steps),
        columns=COLUMNS,
        rows=tuple(_table_row(step, max_cpu) for step in report.steps),
    )


def _cards(report: RunReport) -> tuple[Card, ...]:
    total = report.total_usage
    attempts = [a for s in report.steps for a in s.attempts]
    return (
        Card("status", report.status),
        Card("duration", f"{report.duration_seconds:.1f} s"),
        Card("steps", str(sum(not s.program_of for s in report.steps))),
        Card("relaunches", str(sum(s.relaunches for s in report.steps))),
        Card("OOM kills", str(sum(a.oom_killed for a in attempts))),
        Card("preemptions", str(sum(a.preempted for a in attempts))),
        Card("CPU-hours", f"{total.cpu_hours:.3f}"),
        Card("memory GiB-hours", f"{total.memory_gib_seconds / 3600:.3f}"),
        Card("GPU-hours", f"{total.gpu_seconds / 3600:.3f}"),
        Card("over-sized steps", str(sum(_oversized(s.measured) for s in report.steps))),
        *([Card("cost (wasted)", " (".join(money(total)) + ")")] if total.cost is not None else []),
    )


def _legend(report: RunReport) -> tuple[LegendEntry, ...]:
    seen = {a.outcome for s in report.steps for a in s.attempts}
    keyed = _ALWAYS_KEYED + tuple((o, COLORS[o]) for o in _KEYED_WHEN_SEEN if o in seen)
    return (LegendEntry("pending", PENDING_COLOR),) + tuple(
        LegendEntry(label, color) for label, color in keyed
    )


def _bar(attempt: Attempt, t0: float) -> AttemptBar:
    a = attempt
    where = f"{a.backend}{' tenant ' + a.tenant if a.tenant else ''}"
    detail = (
        f"attempt {a.number}: {size_text(a)} on {where}{' node ' + a.node if a.node else ''}; "
        f"pending {a.pending_seconds:.1f}s, ran {a.running_seconds:.1f}s → {a.outcome}"
        f"{'; waited: ' + a.pending_reason if a.pending_reason else ''}"
    )
    return AttemptBar(
        outcome=a.outcome,
        number=a.number,
        launched=a.launched_at - t0,
        running=(a.running_at or a.ended_at) - t0,
        ended=a.ended_at - t0,
        color=color_of(a.outcome),
        label=f"#{a.number} {a.memory}",
        mark=mark_of(a),
        detail=detail,
    )


def _timeline_row(step: StepTimeline, t0: float) -> TimelineRow:
    """Captioned with backend · size, and any note; no bars where no times were recorded."""
    if not step.attempts:
        return TimelineRow(step_key=step.step_key, caption=step.note, bars=())
    first = step.attempts[0]
    note = f" · {step.note}" if step.note else ""
    return TimelineRow(
        step_key=step.step_key,
        caption=f"{first.backend} · {size_text(first)}{note}",
        bars=tuple(_bar(a, t0) for a in step.attempts) if step.timed else (),
    )


def _table_row(step: StepTimeline, max_cpu: float) -> TableRow:
    u = step.usage
    if not step.attempts:
        return TableRow((step.step_key, *("—",) * (len(COLUMNS) - 2), step.outcome), 0.0)
    first = step.attempts[0]
    cells = (
        step.step_key,
        first.backend + (f" / {first.tenant}" if first.tenant else ""),
        ", ".join(sorted({a.node for a in step.attempts if a.node})) or "—",
        size_text(first),
        str(len(step.attempts)),
        " → ".join(step.memory_tried),
        *requested_and_used(step.measured),
        ", ".join(step.reasons) or "—",
        f"{u.cpu_seconds:.1f}" if u else "—",
        f"{u.memory_gib_seconds:.1f}" if u else "—",
        f"{u.gpu_seconds:.1f}" if u else "—",
        *money(u),
        f"{step.seconds_lost:.1f}" if step.timed else "—",
        step.outcome,
    )
    share = u.cpu_seconds / max_cpu if u and max_cpu else 0.0
    return TableRow(cells, cpu_share=share)


def money(usage: Usage | None) -> tuple[str, str]:
    """The cost and wasted cells: "—" where the run had no `prices` (docs/cost.md).

    Example:
        >>> money(Usage(cost=1.23456, wasted=0.4, currency="EUR"))
        ('1.2346 EUR', '0.4000 EUR')
        >>> money(Usage())
        ('—', '—')
    """
    if usage is None or usage.cost is None:
        return "—", "—"
    return f"{usage.cost:.4f} {usage.currency}", f"{usage.wasted or 0.0:.4f} {usage.currency}"


def _oversized(measured: Measured | None) -> bool:
    return measured is not None and measured.memory_share < OVERSIZED_BELOW


def requested_and_used(measured: Measured | None) -> tuple[str, str]:
    """The "requested" and "peak used" cells: the last size given, and the peaks measured.

    Example:
        >>> requested_and_used(Measured(4.0, 8 * 1024**3, 0.9, 1536 * 1024**2))
        ('4 CPU / 8Gi', '0.9 CPU / 1.5Gi (19% of memory, over-sized)')
    """
    if measured is None:
        return ("—", "—")
    m = measured
    oversized = ", over-sized" if _oversized(m) else ""
    return (
        f"{m.requested_cpu:g} CPU / {format_memory(m.requested_memory_bytes)}",
        f"{'—' if m.peak_cpu is None else f'{m.peak_cpu:g}'} CPU / "
        f"{_gib_or_mib(m.peak_memory_bytes)} "
        f"({m.memory_share:.0%} of memory{oversized})",
    )


def _gib_or_mib(num_bytes: int) -> str:
    if num_bytes >= 1024**3:
        return f"{num_bytes / 1024**3:.1f}Gi"
    return f"{num_bytes / 1024**2:.0f}Mi"


__all__ = [
    "OVERSIZED_BELOW",
    "COLORS",
    "COLUMNS",
    "PENDING_COLOR",
    "AttemptBar",
    "Card",
    "LegendEntry",
    "ReportSummary",
    "TableRow",
    "TimelineRow",
    "axis_ticks",
    "color_of",
    "mark_of",
    "requested_and_used",
    "size_text",
    "summarize",
]
