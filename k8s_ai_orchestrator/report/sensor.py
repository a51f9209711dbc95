"""Write a finished run's report from a sensor or an op, and point the UI at it.

Example:
    >>> from dagster import Definitions
    >>> defs = Definitions(sensors=[run_report_sensor("/shared/reports")])
"""

from __future__ import annotations

from pathlib import Path

from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    DefaultSensorStatus,
    MetadataValue,
    RunStatusSensorContext,
    RunStatusSensorDefinition,
    run_status_sensor,
)

from .files import write_report
from .model import REPORT_TAG, load_run_report


def report_metadata(
    run_id: str, out_dir: str | Path, instance: DagsterInstance | None = None
) -> dict[str, MetadataValue]:
    """Write the run's report and return metadata entries that link to it.

    Log them from a run-status sensor or an op so the UI shows where the report is:
    `context.log_event(AssetObservation(..., metadata=report_metadata(run_id, "reports")))`.

    Example:
        >>> report_metadata(run_id, "/shared/reports")  # doctest: +SKIP
        {'report_html': MetadataValue.path(...), 'report_url': MetadataValue.url(...), ...}
    """
    if instance is None:
        with DagsterInstance.get() as own:
            return report_metadata(run_id, out_dir, own)
    report = load_run_report(instance, run_id)
    files = write_report(report, out_dir)
    total = report.total_usage
    return {
        "report_html": MetadataValue.path(str(files.html.resolve())),
        "report_png": MetadataValue.path(str(files.png.resolve())),
        "report_url": MetadataValue.url(files.html.resolve().as_uri()),
        "cpu_hours": MetadataValue.float(round(total.cpu_hours, 4)),
        "relaunches": MetadataValue.int(sum(s.relaunches for s in report.steps)),
    }


def run_report_sensor(
    out_dir: str | Path,
    *,
    name: str = "k8s_ai_run_report",
    run_status: DagsterRunStatus | None = None,
    minimum_interval_seconds: int = 30,
    default_status: DefaultSensorStatus | None = None,
) -> RunStatusSensorDefinition:
    """A run-status sensor that writes each finished run's report and tags the run with it.

    The run page in the UI then shows tags `k8s_ai/report` (the HTML) and
    `k8s_ai/report_png`; the sensor's tick log names both files. It watches runs of its
    own code location that end with `run_status` (default SUCCESS); add a second one with
    `run_status=DagsterRunStatus.FAILURE` and another name for failed runs.

    Example:
        >>> defs = Definitions(assets=..., sensors=[run_report_sensor("/shared/reports")])
        ... # doctest: +SKIP
    """

    @run_status_sensor(
        run_status=run_status or DagsterRunStatus.SUCCESS,
        name=name,
        minimum_interval_seconds=minimum_interval_seconds,
        default_status=default_status or DefaultSensorStatus.STOPPED,
        description=f"Writes a timeline and resource report of each run into {out_dir}.",
    )
    def _write_run_report(context: RunStatusSensorContext) -> None:
        run_id = context.dagster_run.run_id
        files = write_report(load_run_report(context.instance, run_id), out_dir)
        tags = {
            REPORT_TAG: str(files.html.resolve()),
            REPORT_TAG + "_png": str(files.png.resolve()),
        }
        context.instance.add_run_tags(run_id, tags)
        context.log.info(f"run {run_id}: report {files.html} and {files.png}")

    return _write_run_report


__all__ = ["report_metadata", "run_report_sensor"]
