"""Write a report's files: the HTML page, and the PNG drawn by matplotlib or screenshotted.

The PNG is drawn with matplotlib when it is installed (`pip install matplotlib`), else taken
as a screenshot of the HTML page by a headless Chromium found on PATH. Both show the same
`ReportSummary`.

Example:
    >>> from k8s_ai_orchestrator.report.model import RunReport
    >>> files = write_report(RunReport("813621f2", "job", "SUCCESS", 0.0, 1.0, ()), "reports")
    ... # doctest: +SKIP
    >>> files.png  # doctest: +SKIP
    PosixPath('reports/run-813621f2.png')
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .html import BOTTOM, ROW_H, TOP, render_html
from .model import ReportError, RunReport
from .png import write_png

SCREENSHOT_TIMEOUT_S = 60
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@dataclass(frozen=True)
class ReportFiles:
    """Where `write_report` put the report.

    Example:
        >>> ReportFiles(Path("r/run-1.html"), Path("r/run-1.png")).png.name
        'run-1.png'
    """

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
    return write_png(report, path)


def screenshot_png(html: Path, path: Path, *, rows: int = 10) -> Path:
    """Write a PNG of an HTML report page with a headless Chromium found on PATH.

    Example:
        >>> screenshot_png(Path("reports/run-813621f2.html"), Path("run.png"))  # doctest: +SKIP
        PosixPath('run.png')
    """
    browser = next((found for found in map(shutil.which, BROWSERS) if found), None)
    if browser is None:
        raise ReportError(
            f"cannot write {path}: neither matplotlib nor a Chromium is installed "
            f"(looked for {', '.join(BROWSERS)} on PATH); pip install matplotlib, or install "
            f"Chromium; the HTML report is at {html}"
        )
    height = TOP + ROW_H * rows + BOTTOM + 200 + 26 * rows
    with tempfile.TemporaryDirectory(prefix="k8s-ai-report-") as profile:
        command = [
            browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--disable-background-networking", f"--user-data-dir={profile}",
            f"--window-size=1050,{height}", f"--screenshot={path.resolve()}",
            html.resolve().as_uri(),
        ]  # fmt: skip
        try:
            subprocess.run(command, check=True, capture_output=True, timeout=SCREENSHOT_TIMEOUT_S)
        except subprocess.CalledProcessError as failed:
            tail = failed.stderr.decode(errors="replace").strip().splitlines()[-3:]
            raise ReportError(
                f"cannot write {path}: {browser} exited with status {failed.returncode} "
                f"taking the screenshot of {html} ({' | '.join(tail) or 'no output'}); "
                "pip install matplotlib to draw the PNG without a browser"
            ) from failed
        except subprocess.TimeoutExpired as slow:
            raise ReportError(
                f"cannot write {path}: {browser} took over {SCREENSHOT_TIMEOUT_S}s taking the "
                f"screenshot of {html}; pip install matplotlib to draw the PNG without a browser"
            ) from slow
    return path


__all__ = ["ReportFiles", "render_png", "screenshot_png", "write_report"]
