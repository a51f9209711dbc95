"""Draw a report's `ReportSummary` with matplotlib: the same page as the HTML, as a PNG.

Top to bottom: title and subtitle, the summary cards, the colour legend, the Gantt of
attempts (grey Pending, coloured by outcome, "✕ OOM" / "✕ preempted" marks) and the
per-step table. `report_figure` returns the figure, so a caller can inspect or restyle it
before `write_png` saves it. matplotlib is optional (`pip install matplotlib`).

Example:
    >>> from k8s_ai_orchestrator.report.model import RunReport
    >>> fig = report_figure(RunReport("813621f2", "job", "SUCCESS", 0.0, 1.0, steps=()))
    >>> fig.texts[0].get_text()
    'Run 813621f2 · job'
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from .model import ReportError, RunReport
from .summary import (
    CPU_COLUMN,
    PENDING_COLOR,
    USAGE_BAR_COLOR,
    ReportSummary,
    TimelineRow,
    summarize,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyBboxPatch

WIDTH_IN, MARGIN_IN, LABEL_IN = 14.0, 0.3, 2.4  # figure width, side margins, step labels
CARD_H_IN, CARD_GAP_IN, ROW_IN, TABLE_ROW_IN = 0.62, 0.1, 0.42, 0.28
DPI = 110
INK, MUTED, RULE, CARD_EDGE = "#1d2633", "#666666", "#e6e9ee", "#dde2e8"
HEADER_IN, AXIS_IN = 2.0, 0.75  # title to legend; the Gantt's tick labels and axis label
FONT = 8.5  # table and legend size, points


@dataclass(frozen=True)
class _Page:
    """Converts inches from the top-left corner into figure fractions."""

    fig: Figure
    height_in: float

    def x(self, inches: float) -> float:
        return inches / WIDTH_IN

    def y(self, inches_from_top: float) -> float:
        return 1 - inches_from_top / self.height_in

    def text_width_in(
        self, renderer: RendererBase, text: str, size: float, weight: str = "normal"
    ) -> float:
        artist = self.fig.text(0, 0, text, fontsize=size, weight=weight)
        width = artist.get_window_extent(renderer).width / DPI
        artist.remove()
        return float(width)


def _heights(summary: ReportSummary) -> tuple[float, float, float]:
    """Inches of the header (title to legend), the Gantt's plot area, and the whole page."""
    gantt = ROW_IN * max(len(summary.timeline), 1) + 0.3
    table = TABLE_ROW_IN * (len(summary.rows) + 1) + 0.15
    return HEADER_IN, gantt, HEADER_IN + gantt + AXIS_IN + table


def report_figure(report: RunReport) -> Figure:
    """The report drawn on a matplotlib figure (not yet saved).

    Example:
        >>> fig = report_figure(report)  # doctest: +SKIP
        >>> fig.savefig("run.png")  # doctest: +SKIP
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as missing:
        raise ReportError(
            f"cannot draw the PNG of run '{report.run_id}': matplotlib is not installed; "
            "pip install 'k8s-ai-orchestrator[report]' (or matplotlib), or write the report "
            "with write_report, which falls back to a Chromium screenshot"
        ) from missing
    summary = summarize(report)
    header, gantt, height = _heights(summary)
    fig = Figure(figsize=(WIDTH_IN, height), dpi=DPI, facecolor="white")
    renderer = FigureCanvasAgg(fig).get_renderer()
    page = _Page(fig, height)
    _draw_header(page, renderer, summary)
    left, width = page.x(MARGIN_IN + LABEL_IN), page.x(WIDTH_IN - 2 * MARGIN_IN - LABEL_IN)
    ax = fig.add_axes((left, page.y(header + gantt), width, gantt / height))
    _draw_gantt(ax, page, summary)
    _draw_table(page, renderer, summary, top_in=header + gantt + AXIS_IN)
    return fig


def write_png(report: RunReport, path: Path) -> Path:
    """Draw the report with matplotlib and save it as a PNG at `path`.

    Example:
        >>> write_png(report, Path("reports/run-813621f2.png"))  # doctest: +SKIP
        PosixPath('reports/run-813621f2.png')
    """
    report_figure(report).savefig(path, dpi=DPI, facecolor="white")
    return path


def _draw_header(page: _Page, renderer: RendererBase, summary: ReportSummary) -> None:
    fig = page.fig
    fig.text(page.x(MARGIN_IN), page.y(0.3), summary.title, fontsize=16, weight="bold", color=INK)
    fig.text(page.x(MARGIN_IN), page.y(0.55), summary.subtitle, fontsize=9, color=MUTED)
    count = len(summary.cards)
    card_w = (WIDTH_IN - 2 * MARGIN_IN - (count - 1) * CARD_GAP_IN) / max(count, 1)
    top = 0.75
    for number, card in enumerate(summary.cards):
        left = MARGIN_IN + number * (card_w + CARD_GAP_IN)
        fig.patches.append(_box(page, left, top, card_w, CARD_H_IN))
        fig.text(page.x(left + 0.12), page.y(top + 0.3), card.value, fontsize=13, weight="bold")
        fig.text(page.x(left + 0.12), page.y(top + 0.5), card.label, fontsize=8, color=MUTED)
    legend_y, left = top + CARD_H_IN + 0.32, MARGIN_IN
    for entry in summary.legend:
        fig.patches.append(_box(page, left, legend_y - 0.12, 0.14, 0.14, fill=entry.color))
        fig.text(page.x(left + 0.2), page.y(legend_y), entry.label, fontsize=FONT)
        left += 0.2 + page.text_width_in(renderer, entry.label, FONT) + 0.25


def _box(
    page: _Page, left: float, top: float, width: float, height: float, fill: str = "none"
) -> FancyBboxPatch:
    from matplotlib.patches import FancyBboxPatch

    edge = CARD_EDGE if fill == "none" else fill
    return FancyBboxPatch(
        (page.x(left), page.y(top + height)),
        page.x(width),
        height / page.height_in,
        boxstyle="round,pad=0,rounding_size=0.004",
        transform=page.fig.transFigure,
        facecolor=fill,
        edgecolor=edge,
        linewidth=1,
    )


def _draw_gantt(ax: Axes, page: _Page, summary: ReportSummary) -> None:
    from matplotlib.transforms import blended_transform_factory

    span = summary.span
    ax_width_px = ax.get_position().width * WIDTH_IN * DPI
    labels_at = blended_transform_factory(page.fig.transFigure, ax.transData)
    for number, row in enumerate(summary.timeline):
        page.fig.text(
            page.x(MARGIN_IN),
            number - 0.08,
            row.step_key,
            transform=labels_at,
            fontsize=9.5,
            weight="bold",
            color=INK,
        )
        page.fig.text(
            page.x(MARGIN_IN),
            number + 0.28,
            row.caption,
            transform=labels_at,
            fontsize=7.5,
            color=MUTED,
        )
        _draw_bars(ax, row, number, px_per_second=ax_width_px / span)
    ax.set_xticks(summary.ticks, [f"{t:g}s" for t in summary.ticks], fontsize=8, color="#555555")
    ax.set_yticks([])
    ax.set_xlim(0, span)
    ax.set_ylim(max(len(summary.timeline), 1) - 0.5, -0.8)
    ax.grid(axis="x", color=RULE)
    ax.set_axisbelow(True)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_xlabel("seconds since run start (grey: pending)", fontsize=8, color=MUTED)


def _draw_bars(ax: Axes, row: TimelineRow, y: float, px_per_second: float) -> None:
    for bar in row.bars:
        if bar.pending_seconds > 0:
            ax.barh(y, bar.pending_seconds, 0.5, left=bar.launched, color=PENDING_COLOR)
        width = max(bar.running_seconds, 2 / px_per_second)
        ax.barh(y, width, 0.5, left=bar.running, color=bar.color)
        if width * px_per_second > 7.5 * len(bar.label):
            ax.text(
                bar.running + 4 / px_per_second,
                y,
                bar.label,
                va="center",
                fontsize=8,
                color="white",
            )
        if bar.mark:
            ax.text(
                bar.ended,
                y - 0.3,
                bar.mark,
                ha="center",
                va="bottom",
                fontsize=7.5,
                color=bar.color,
                weight="bold",
            )


def _draw_table(page: _Page, renderer: RendererBase, summary: ReportSummary, top_in: float) -> None:
    fig = page.fig
    lines = [summary.columns, *(row.cells for row in summary.rows)]
    pad = 0.16
    widths = [
        max(page.text_width_in(renderer, line[c], FONT, "bold") for line in lines) + pad
        for c in range(len(summary.columns))
    ]
    scale = min(1.0, (WIDTH_IN - 2 * MARGIN_IN) / sum(widths))
    lefts = [MARGIN_IN + sum(widths[:c]) * scale for c in range(len(widths))]
    for number, line in enumerate(lines):
        base = top_in + number * TABLE_ROW_IN
        for column, text in enumerate(line):
            share = summary.rows[number - 1].cpu_share if number else 0.0
            if column == CPU_COLUMN and share > 0:
                fig.patches.append(
                    _box(
                        page,
                        lefts[column],
                        base - 0.17,
                        widths[column] * scale * 0.8 * share,
                        0.2,
                        fill=USAGE_BAR_COLOR,
                    )
                )
            fig.text(
                page.x(lefts[column]),
                page.y(base),
                text,
                fontsize=FONT * scale,
                weight="bold" if number == 0 else "normal",
                color=INK,
            )
        rule = page.y(base + 0.09)
        fig.add_artist(_rule(fig, page.x(MARGIN_IN), page.x(WIDTH_IN - MARGIN_IN), rule))


def _rule(fig: Figure, x0: float, x1: float, y: float) -> Line2D:
    from matplotlib.lines import Line2D

    return Line2D([x0, x1], [y, y], transform=fig.transFigure, color=RULE, linewidth=1)


__all__ = ["report_figure", "write_png"]
