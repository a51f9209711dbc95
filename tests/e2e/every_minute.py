"""A code location for the daemon test: the example's assets and job on an every-minute cron.

The example's own `nightly_vegetation_risk` fires at 02:00 UTC, too late for a test; this
location reuses the example's assets, resources, executor and `vegetation_risk` job unchanged
and adds a schedule the daemon fires at the next minute. It requests one run per instance.
"""

from dagster import (
    DefaultScheduleStatus,
    Definitions,
    RunRequest,
    RunsFilter,
    ScheduleEvaluationContext,
    SkipReason,
    schedule,
)

from example_project.definitions import defs as example_defs
from example_project.definitions import vegetation_risk

SCHEDULE_NAME = "vegetation_risk_every_minute"


@schedule(
    name=SCHEDULE_NAME,
    job=vegetation_risk,
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
    assets=example_defs.assets,
    jobs=[vegetation_risk],
    schedules=[vegetation_risk_every_minute],
    resources=example_defs.resources,
    executor=example_defs.executor,
)
