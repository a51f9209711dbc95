"""Draw a `RunReport`: a self-contained HTML page (inline SVG Gantt) and a PNG.

The HTML needs no network and no assets. The PNG is drawn with matplotlib when it is
installed (`pip install matplotlib`), else taken as a screenshot of the HTML page by a
headless Chromium found on PATH.

Example:
    >>> from k8s_ai_orchestrator.report.model import RunReport
    >>> html = render_html(RunReport("813621f2", "job", "SUCCESS", 0.0, 1.0, steps=()))
    >>> html.startswith("<!DOCTYPE html>")
    True
"""

from __future__ import annotations

import html as htmllib
import math
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model import Attempt, ReportError, RunReport, StepTimeline

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
OTHER_COLOR = "#8b1e1e"
PENDING_COLOR = "#d5dbe3"
LABEL_W, CHART_W, ROW_H, TOP, BOTTOM = 230, 760, 34, 30, 34
SCREENSHOT_TIMEOUT_S = 60


def color_of(outcome: str) -> str:
    """The bar colour of an attempt's outcome."""
    return COLORS.get(outcome, OTHER_COLOR)


def mark_of(attempt: Attempt) -> str:
    """The short mark drawn after an attempt that was relaunched: "OOM", "preempted", ..."""
    if attempt.oom_killed:
        return "OOM"
    if attempt.preempted:
        return attempt.outcome.lower()
    return ""


def _esc(value: object) -> str:
    return htmllib.escape(str(value), quote=True)


def _tick_step(span: float) -> float:
    raw = max(span, 1e-9) / 8
    magnitude = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)


def _size_text(a: Attempt) -> str:
    text = f"{a.cpu:g} CPU / {a.memory}" + (f" / {a.gpu} GPU" if a.gpu else "")
    text = f"{a.nodes} nodes × ({text})" if a.nodes > 1 else text
    return text if a.size == "custom" else f"{a.size}: {text}"


def _attempt_svg(a: Attempt, y: float, x_of: Callable[[float], float]) -> list[str]:
    x0, x_run, x1 = x_of(a.launched_at), x_of(a.running_at or a.ended_at), x_of(a.ended_at)
    title = (
        f"attempt {a.number}: {_size_text(a)} on {a.backend}"
        f"{' tenant ' + a.tenant if a.tenant else ''}{' node ' + a.node if a.node else ''}; "
        f"pending {a.pending_seconds:.1f}s, ran {a.running_seconds:.1f}s → {a.outcome}"
        f"{'; waited: ' + a.pending_reason if a.pending_reason else ''}"
    )
    parts = [f'<g class="attempt" data-outcome="{_esc(a.outcome)}"><title>{_esc(title)}</title>']
    if x_run > x0:
        parts.append(
            f'<rect x="{x0:.1f}" y="{y:.1f}" width="{x_run - x0:.1f}" height="18" '
            f'fill="{PENDING_COLOR}"/>'
        )
    width = max(x1 - x_run, 2.0)
    parts.append(
        f'<rect x="{x_run:.1f}" y="{y:.1f}" width="{width:.1f}" height="18" rx="2" '
        f'fill="{color_of(a.outcome)}"/>'
    )
    label = f"#{a.number} {a.memory}"
    if width > 7 * len(label):
        parts.append(
            f'<text x="{x_run + 4:.1f}" y="{y + 13:.1f}" fill="#fff" font-size="11">'
            f"{_esc(label)}</text>"
        )
    mark = mark_of(a)
    if mark:
        parts.append(
            f'<text x="{x1:.1f}" y="{y - 2:.1f}" fill="{color_of(a.outcome)}" font-size="10" '
            f'text-anchor="middle" font-weight="bold">✕ {_esc(mark)}</text>'
        )
    parts.append("</g>")
    return parts


def gantt_svg(report: RunReport) -> str:
    """The timeline as an SVG element: one row per step, one bar per attempt.

    Grey is time Pending (waiting for capacity or a node); the coloured part is time running,
    coloured by how the attempt ended; "✕ OOM" / "✕ preempted" mark relaunched attempts.
    """
    t0 = report.started_at
    span = max(report.duration_seconds, 1.0)
    height = TOP + ROW_H * max(len(report.steps), 1) + BOTTOM
    width = LABEL_W + CHART_W + 20

    def x_of(ts: float) -> float:
        return LABEL_W + (ts - t0) / span * CHART_W

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" role="img" '
        f'aria-label="Step timeline of run {_esc(report.run_id)}">'
    ]
    step = _tick_step(span)
    tick = 0.0
    while tick <= span + 1e-9:
        x = LABEL_W + tick / span * CHART_W
        out.append(
            f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{height - BOTTOM + 4}" '
            f'stroke="#e6e9ee"/><text x="{x:.1f}" y="{height - BOTTOM + 18}" font-size="11" '
            f'text-anchor="middle" fill="#555">{tick:g}s</text>'
        )
        tick += step
    for row, timeline in enumerate(report.steps):
        y = TOP + row * ROW_H
        first = timeline.attempts[0]
        out.append(
            f'<text x="8" y="{y + 10}" font-size="12" font-weight="bold">'
            f"{_esc(timeline.step_key)}</text>"
            f'<text x="8" y="{y + 23}" font-size="10" fill="#666">'
            f"{_esc(first.backend)} · {_esc(_size_text(first))}</text>"
        )
        for attempt in timeline.attempts:
            out.extend(_attempt_svg(attempt, y + 4, x_of))
    out.append("</svg>")
    return "".join(out)


def _legend() -> str:
    items = [("pending", PENDING_COLOR)] + [
        (name, COLORS[name])
        for name in ("succeeded", "OOMKilled", "Preempted", "failed", "retried")
    ]
    return " ".join(
        f'<span class="key"><i style="background:{c}"></i>{_esc(n)}</span>' for n, c in items
    )


def _cards(report: RunReport) -> str:
    total = report.total_usage
    attempts = [a for s in report.steps for a in s.attempts]
    cards = [
        ("status", report.status),
        ("duration", f"{report.duration_seconds:.1f} s"),
        ("steps", str(len(report.steps))),
        ("relaunches", str(sum(s.relaunches for s in report.steps))),
        ("OOM kills", str(sum(a.oom_killed for a in attempts))),
        ("preemptions", str(sum(a.preempted for a in attempts))),
        ("CPU-hours", f"{total.cpu_hours:.3f}"),
        ("memory GiB-hours", f"{total.memory_gib_seconds / 3600:.3f}"),
        ("GPU-hours", f"{total.gpu_seconds / 3600:.3f}"),
    ]
    return "".join(
        f'<div class="card"><b>{_esc(v)}</b><span>{_esc(k)}</span></div>' for k, v in cards
    )


def _row(step: StepTimeline, max_cpu: float) -> str:
    u = step.usage
    cpu_share = (u.cpu_seconds / max_cpu * 100) if u and max_cpu else 0.0
    first = step.attempts[0]
    cells = [
        _esc(step.step_key),
        _esc(first.backend + (f" / {first.tenant}" if first.tenant else "")),
        _esc(", ".join(sorted({a.node for a in step.attempts if a.node})) or "—"),
        _esc(_size_text(first)),
        str(len(step.attempts)),
        _esc(" → ".join(step.memory_tried)),
        _esc(", ".join(step.reasons) or "—"),
        f'<div class="bar"><i style="width:{cpu_share:.0f}%"></i>'
        f"<span>{u.cpu_seconds:.1f}</span></div>"
        if u
        else "—",
        f"{u.memory_gib_seconds:.1f}" if u else "—",
        f"{u.gpu_seconds:.1f}" if u else "—",
        f"{step.seconds_lost:.1f}",
        _esc(step.outcome),
    ]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _table(report: RunReport) -> str:
    heads = (
        "step backend node size attempts memory reasons CPU-s GiB-s GPU-s s&nbsp;lost outcome"
    ).split()
    max_cpu = max((s.usage.cpu_seconds for s in report.steps if s.usage), default=0.0)
    rows = "".join(_row(s, max_cpu) for s in report.steps)
    return f"<table><tr>{''.join(f'<th>{h}</th>' for h in heads)}</tr>{rows}</table>"


CSS = """
body{font-family:sans-serif;margin:20px;color:#1d2633;background:#fff;width:1010px}
h1{font-size:20px;margin:0 0 4px} .sub{color:#666;font-size:12px;margin-bottom:12px}
.cards{display:flex;flex-wrap:wrap;gap:8px;margin:10px 0}
.card{border:1px solid #dde2e8;border-radius:6px;padding:6px 10px;min-width:80px}
.card b{display:block;font-size:16px} .card span{font-size:11px;color:#666}
.key{font-size:12px;margin-right:10px} .key i{display:inline-block;width:12px;height:12px;
margin-right:4px;vertical-align:-2px;border-radius:2px}
table{border-collapse:collapse;font-size:12px;margin-top:12px;width:100%}
th,td{border-bottom:1px solid #e6e9ee;padding:4px 6px;text-align:left}
.bar{position:relative;min-width:70px} .bar i{position:absolute;left:0;top:0;bottom:0;
background:#cfe3f7} .bar span{position:relative}
"""


@dataclass(frozen=True)
class ReportFiles:
    """Where `write_report` put the report."""

    html: Path
    png: Path


def write_report(report: RunReport, out_dir: str | Path) -> ReportFiles:
    """Write `run-<id8>.html` and `run-<id8>.png` into `out_dir` (created if missing).

    Example:
        >>> write_report(report, "reports").png  # doctest: +SKIP
        PosixPath('reports/run-813621f2.png')
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"run-{report.run_id[:8]}"
    html = out / f"{stem}.html"
    html.write_text(render_html(report), encoding="utf-8")
    return ReportFiles(html=html, png=render_png(report, out / f"{stem}.png", html=html))


def render_html(report: RunReport) -> str:
    """The report as one HTML page with an inline SVG timeline and a resource table."""
    title = f"Run {report.run_id[:8]} · {report.job_name}"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}'
        f"</title><style>{CSS}</style></head><body><h1>{_esc(title)}</h1>"
        f'<div class="sub">run {_esc(report.run_id)} — steps launched by ai_executor; '
        "resource-seconds are the size each attempt held × the time it held it</div>"
        f'<div class="cards">{_cards(report)}</div><div>{_legend()}</div>'
        f"{gantt_svg(report)}{_table(report)}</body></html>"
    )


def render_png(report: RunReport, path: Path, *, html: Path | None = None) -> Path:
    """Write the report as a PNG: matplotlib if installed, else a Chromium screenshot of `html`.

    Example:
        >>> render_png(report, Path("run.png"))  # doctest: +SKIP
        PosixPath('run.png')
    """
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        if html is None:
            html = path.with_suffix(".html")
            html.write_text(render_html(report), encoding="utf-8")
        return screenshot_png(html, path, rows=len(report.steps))
    return _plot_png(report, path)


def _plot_png(report: RunReport, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    rows = max(len(report.steps), 1)
    fig, (gantt, usage) = plt.subplots(
        1, 2, figsize=(13, 1.6 + 0.42 * rows), width_ratios=(3, 1), sharey=True
    )
    _plot_gantt(gantt, report)
    _plot_usage(usage, report)
    total = report.total_usage
    fig.suptitle(
        f"Run {report.run_id[:8]} · {report.job_name} · {report.status} · "
        f"{report.duration_seconds:.1f}s · {total.cpu_hours:.3f} CPU-h · "
        f"{total.memory_gib_seconds / 3600:.3f} GiB-h · {total.gpu_seconds / 3600:.3f} GPU-h",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot_gantt(ax: Any, report: RunReport) -> None:
    t0 = report.started_at
    for row, step in enumerate(report.steps):
        for a in step.attempts:
            start, run = a.launched_at - t0, (a.running_at or a.ended_at) - t0
            length = max(a.ended_at - t0 - run, 0.01)
            ax.broken_barh([(start, run - start)], (row - 0.3, 0.6), color=PENDING_COLOR)
            ax.broken_barh([(run, length)], (row - 0.3, 0.6), color=color_of(a.outcome))
            ax.text(run, row, f" #{a.number} {a.memory}", va="center", fontsize=7, color="w")
            if mark_of(a):
                ax.text(
                    a.ended_at - t0,
                    row - 0.38,
                    f"✕ {mark_of(a)}",
                    ha="center",
                    fontsize=7,
                    color=color_of(a.outcome),
                    fontweight="bold",
                )
    labels = [
        f"{s.step_key}\n{s.attempts[0].backend} · {_size_text(s.attempts[0])}" for s in report.steps
    ]
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_ylim(len(labels) - 0.5, -0.8)
    ax.set_xlabel("seconds since run start (grey: pending)")
    ax.grid(axis="x", color="#e6e9ee")


def _plot_usage(ax: Any, report: RunReport) -> None:
    cpu = [s.usage.cpu_seconds if s.usage else 0.0 for s in report.steps]
    mem = [s.usage.memory_gib_seconds if s.usage else 0.0 for s in report.steps]
    ax.barh([r - 0.2 for r in range(len(cpu))], cpu, 0.4, label="CPU-s", color="#5b8def")
    ax.barh([r + 0.2 for r in range(len(mem))], mem, 0.4, label="GiB-s", color="#9bc1f2")
    log = max(cpu + mem, default=0.0) > 100
    if log:
        ax.set_xscale("symlog")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_xlabel("resource-seconds" + (" (log)" if log else ""))


def screenshot_png(html: Path, path: Path, *, rows: int = 10) -> Path:
    """Write a PNG of an HTML report page with a headless Chromium found on PATH.

    Example:
        >>> screenshot_png(Path("reports/run-813621f2.html"), Path("run.png"))  # doctest: +SKIP
        PosixPath('run.png')
    """
    names = ("chromium", "chromium-browser", "google-chrome")
    browser = next((found for found in map(shutil.which, names) if found), None)
    if browser is None:
        raise ReportError(
            "cannot write the PNG: install matplotlib (pip install matplotlib) or a Chromium "
            "on PATH; the HTML report was written"
        )
    height = TOP + ROW_H * rows + BOTTOM + 200 + 26 * rows
    with tempfile.TemporaryDirectory(prefix="k8s-ai-report-") as profile:
        subprocess.run(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--no-first-run", "--disable-background-networking", f"--user-data-dir={profile}",
             f"--window-size=1050,{height}", f"--screenshot={path.resolve()}",
             html.resolve().as_uri()],
            check=True, capture_output=True, timeout=SCREENSHOT_TIMEOUT_S,
        )  # fmt: skip
    return path
