"""Run report: a finished run's steps read back from its event log, drawn as HTML and PNG.

Floors, one way: `model` (events → dataclasses) ← `render` (HTML/SVG and PNG) ← `sensor`
(writes the report when a run ends and tags the run with it).

Example:
    >>> from k8s_ai_orchestrator.report import RunReport, render_html
    >>> render_html(RunReport("813621f2", "job", "SUCCESS", 0.0, 1.0, steps=()))[:15]
    '<!DOCTYPE html>'
"""

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
from .render import ReportFiles, render_html, render_png, write_report
from .sensor import report_metadata, run_report_sensor

__all__ = [
    "REPORT_TAG",
    "Attempt",
    "LoggedEvent",
    "ReportError",
    "ReportFiles",
    "RunReport",
    "StepTimeline",
    "Usage",
    "build_report",
    "load_run_report",
    "render_html",
    "render_png",
    "report_metadata",
    "run_report_sensor",
    "write_report",
]
