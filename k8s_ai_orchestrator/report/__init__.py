"""Run report: a finished run's steps read back from its event log, drawn as HTML and PNG.

Floors, one way: `timeline` (the dataclasses) ← `programs` (`AICompute` program rows) ←
`model` (events → dataclasses) ← `summary` (what the report says: cards, legend, timeline
bars, table cells) ← `html` (page with inline SVG) | `png` (matplotlib) ←
`files` (writes both; Chromium screenshot when matplotlib is missing) ← `sensor` (writes the
report when a run ends and tags the run with it).

Example:
    >>> from k8s_ai_orchestrator.report import RunReport, render_html
    >>> render_html(RunReport("813621f2", "job", "SUCCESS", 0.0, 1.0, steps=()))[:15]
    '<!DOCTYPE html>'
"""

from .files import ReportFiles, render_png, write_report
from .html import render_html
from .model import (
    REPORT_TAG,
    Attempt,
    LoggedEvent,
    ReportError,
    RunReport,
    StepTimeline,
    Usage,
    build_report,
    load_run_report,
)
from .png import report_figure
from .sensor import report_metadata, run_report_sensor
from .summary import ReportSummary, summarize

__all__ = [
    "REPORT_TAG",
    "Attempt",
    "LoggedEvent",
    "ReportError",
    "ReportFiles",
    "ReportSummary",
    "RunReport",
    "StepTimeline",
    "Usage",
    "build_report",
    "load_run_report",
    "render_html",
    "render_png",
    "report_figure",
    "report_metadata",
    "run_report_sensor",
    "summarize",
    "write_report",
]
