"""Draw a report's `ReportSummary` as one self-contained HTML page with an inline SVG Gantt.

The page needs no network and no assets.

Example:
    >>> from k8s_ai_orchestrator.report.model import RunReport
    >>> html = render_html(RunReport("813621f2", "job", "SUCCESS", 0.0, 1.0, steps=()))
    >>> html.startswith("<!DOCTYPE html>")
    True
"""

from __future__ import annotations

import html as htmllib
from collections.abc import Callable

from .model import RunReport
from .summary import (
    CPU_COLUMN,
    PENDING_COLOR,
    USAGE_BAR_COLOR,
    AttemptBar,
    ReportSummary,
    TableRow,
    summarize,
)

LABEL_W, CHART_W, ROW_H, TOP, BOTTOM = 230, 760, 34, 30, 34

CSS = f"""
body{{font-family:sans-serif;margin:20px;color:#1d2633;background:#fff;width:1010px}}
h1{{font-size:20px;margin:0 0 4px}} .sub{{color:#666;font-size:12px;margin-bottom:12px}}
.cards{{display:flex;flex-wrap:wrap;gap:8px;margin:10px 0}}
.card{{border:1px solid #dde2e8;border-radius:6px;padding:6px 10px;min-width:80px}}
.card b{{display:block;font-size:16px}} .card span{{font-size:11px;color:#666}}
.key{{font-size:12px;margin-right:10px}} .key i{{display:inline-block;width:12px;height:12px;
margin-right:4px;vertical-align:-2px;border-radius:2px}}
table{{border-collapse:collapse;font-size:12px;margin-top:12px;width:100%}}
th,td{{border-bottom:1px solid #e6e9ee;padding:4px 6px;text-align:left}} th{{white-space:nowrap}}
.bar{{position:relative;min-width:70px}} .bar i{{position:absolute;left:0;top:0;bottom:0;
background:{USAGE_BAR_COLOR}}} .bar span{{position:relative}}
"""


def _esc(value: object) -> str:
    return htmllib.escape(str(value), quote=True)


def _bar_svg(bar: AttemptBar, y: float, x_of: Callable[[float], float]) -> list[str]:
    x0, x_run, x1 = x_of(bar.launched), x_of(bar.running), x_of(bar.ended)
    parts = [
        f'<g class="attempt" data-outcome="{_esc(bar.outcome)}"><title>{_esc(bar.detail)}</title>'
    ]
    if x_run > x0:
        parts.append(
            f'<rect x="{x0:.1f}" y="{y:.1f}" width="{x_run - x0:.1f}" height="18" '
            f'fill="{PENDING_COLOR}"/>'
        )
    width = max(x1 - x_run, 2.0)
    parts.append(
        f'<rect x="{x_run:.1f}" y="{y:.1f}" width="{width:.1f}" height="18" rx="2" '
        f'fill="{bar.color}"/>'
    )
    if width > 7 * len(bar.label):
        parts.append(
            f'<text x="{x_run + 4:.1f}" y="{y + 13:.1f}" fill="#fff" font-size="11">'
            f"{_esc(bar.label)}</text>"
        )
    if bar.mark:
        parts.append(
            f'<text x="{x1:.1f}" y="{y - 2:.1f}" fill="{bar.color}" font-size="10" '
            f'text-anchor="middle" font-weight="bold">{_esc(bar.mark)}</text>'
        )
    parts.append("</g>")
    return parts


def gantt_svg(summary: ReportSummary, run_id: str = "") -> str:
    """The timeline as an SVG element: one row per step, one bar per attempt.

    Grey is time Pending (waiting for capacity or a node); the coloured part is time running,
    coloured by how the attempt ended; "✕ OOM" / "✕ preempted" mark relaunched attempts.

    Example:
        >>> from k8s_ai_orchestrator.report.model import RunReport
        >>> gantt_svg(summarize(RunReport("r1", "job", "SUCCESS", 0.0, 1.0, ())))[:4]
        '<svg'
    """
    span = summary.span
    height = TOP + ROW_H * max(len(summary.timeline), 1) + BOTTOM
    width = LABEL_W + CHART_W + 20

    def x_of(seconds: float) -> float:
        return LABEL_W + seconds / span * CHART_W

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" role="img" '
        f'aria-label="Step timeline of run {_esc(run_id)}">'
    ]
    for tick in summary.ticks:
        x = x_of(tick)
        out.append(
            f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{height - BOTTOM + 4}" '
            f'stroke="#e6e9ee"/><text x="{x:.1f}" y="{height - BOTTOM + 18}" font-size="11" '
            f'text-anchor="middle" fill="#555">{tick:g}s</text>'
        )
    for number, row in enumerate(summary.timeline):
        y = TOP + number * ROW_H
        out.append(
            f'<text x="8" y="{y + 10}" font-size="12" font-weight="bold">'
            f"{_esc(row.step_key)}</text>"
            f'<text x="8" y="{y + 23}" font-size="10" fill="#666">{_esc(row.caption)}</text>'
        )
        for bar in row.bars:
            out.extend(_bar_svg(bar, y + 4, x_of))
    out.append("</svg>")
    return "".join(out)


def _legend(summary: ReportSummary) -> str:
    return " ".join(
        f'<span class="key"><i style="background:{e.color}"></i>{_esc(e.label)}</span>'
        for e in summary.legend
    )


def _cards(summary: ReportSummary) -> str:
    return "".join(
        f'<div class="card"><b>{_esc(c.value)}</b><span>{_esc(c.label)}</span></div>'
        for c in summary.cards
    )


def _cell(row: TableRow, column: int) -> str:
    text = _esc(row.cells[column])
    if column != CPU_COLUMN or row.cells[column] == "—":
        return f"<td>{text}</td>"
    width = f"{row.cpu_share * 100:.0f}%"
    return f'<td><div class="bar"><i style="width:{width}"></i><span>{text}</span></div></td>'


def _table(summary: ReportSummary) -> str:
    heads = "".join(f"<th>{_esc(h)}</th>" for h in summary.columns)
    rows = "".join(
        "<tr>" + "".join(_cell(row, c) for c in range(len(row.cells))) + "</tr>"
        for row in summary.rows
    )
    return f"<table><tr>{heads}</tr>{rows}</table>"


def render_html(report: RunReport) -> str:
    """The report as one HTML page: cards, legend, SVG timeline and the per-step table.

    Example:
        >>> "<table>" in render_html(RunReport("813621f2", "job", "SUCCESS", 0.0, 1.0, ()))
        True
    """
    summary = summarize(report)
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_esc(summary.title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{_esc(summary.title)}</h1>"
        f'<div class="sub">{_esc(summary.subtitle)}</div>'
        f'<div class="cards">{_cards(summary)}</div><div>{_legend(summary)}</div>'
        f"{gantt_svg(summary, report.run_id)}{_table(summary)}</body></html>"
    )


__all__ = ["gantt_svg", "render_html"]
