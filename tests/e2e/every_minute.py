"""A code location for the daemon test: the example's assets and job on an every-minute cron.

The example's own `nightly_vegetation_risk` fires at 02:00 UTC, too late for a test; this
location reuses the example's assets, resources, executor and `vegetation_risk` job unchanged
and adds a schedule the daemon fires at the next minute (one run per instance), and the
run-report sensor, which writes each successful run's report into env `E2E_REPORT_DIR`.
"""

import os

from dagster import (
    DefaultScheduleStatus,
    DefaultSensorStatus,
    Definitions,
    RunRequest,
    RunsFilter,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

import example_project.definitions as example
from k8s_ai_orchestrator.report import run_report_sensor

SCHEDULE_NAME = "vegetation_risk_every_minute"


@schedule(
    name=SCHEDULE_NAME,
    job=example.vegetation_risk,
    cron_schedule="* * * * *",
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.STOPPED,
)
def vegetation_risk_every_minute(context: ScheduleEvaluationContext) -> RunRequest | SkipReason:
    """Request a vegetation_risk run at the next minute, once."""
    earlier = context.instance.get_runs_count(
        RunsFilter(tags={"dagster/schedule_name": SCHEDULE_NAME})
    )
    if earlier:
        return SkipReason("this instance already has a run from this schedule")
    return RunRequest(tags={"trigger": "every_minute"})


defs = Definitions(
    assets=example.defs.assets,
    jobs=[example.vegetation_risk],
    schedules=[vegetation_risk_every_minute],
    sensors=[
        run_report_sensor(
            os.environ.get("E2E_REPORT_DIR", "k8s-ai-reports"),
            minimum_interval_seconds=5,
            default_status=DefaultSensorStatus.RUNNING,
        )
    ],
    resources=example.defs.resources,
    executor=example.defs.executor,
)
