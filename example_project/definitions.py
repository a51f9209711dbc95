"""Dagster definitions of the example: assets, resources, a nightly schedule and a sensor.

Load with `dagster dev -m example_project.definitions` or `dagster-webserver -m ...`.
"""

import os
from pathlib import Path

from dagster import (
    AssetSelection,
    DefaultScheduleStatus,
    DefaultSensorStatus,
    Definitions,
    RunRequest,
    SensorEvaluationContext,
    SkipReason,
    define_asset_job,
    schedule,
    sensor,
)

from k8s_ai_orchestrator import AICompute, CheckpointStore, Gang, ai_executor

from .assets import mosaic, risk_scores, tile_assets, vegetation_index
from .report_program import risk_report
from .scenes import inbox_dir
from .training import vegetation_model

vegetation_risk = define_asset_job(
    "vegetation_risk",
    selection=AssetSelection.groups("vegetation", "training"),
    description="Tiles → mosaic → vegetation index → risk scores → risk report, and the "
    "2-node model.",
)


@schedule(
    job=vegetation_risk,
    cron_schedule="0 2 * * *",
    execution_timezone="UTC",
    default_status=DefaultScheduleStatus.STOPPED,
)
def nightly_vegetation_risk(context):  # type: ignore[no-untyped-def]
    """Recompute the risk map every night at 02:00 UTC."""
    return RunRequest(tags={"trigger": "nightly"})


@sensor(job=vegetation_risk, minimum_interval_seconds=5, default_status=DefaultSensorStatus.STOPPED)
def new_scenes(context: SensorEvaluationContext):  # type: ignore[no-untyped-def]
    """Request a run when new scene files land in the inbox folder."""
    seen = context.cursor or ""
    landed = sorted(p.name for p in inbox_dir().glob("*.json")) if inbox_dir().exists() else []
    fresh = [name for name in landed if name > seen]
    if not fresh:
        return SkipReason(f"no new scenes in {inbox_dir()}")
    context.update_cursor(fresh[-1])
    return RunRequest(run_key=fresh[-1], tags={"trigger": "new_scenes", "scenes": ",".join(fresh)})


def _checkpoint_root() -> str:
    root = os.environ.get("VEGETATION_CHECKPOINTS")
    return root or Path(".demo/checkpoints").resolve().as_uri()


defs = Definitions(
    assets=[*tile_assets, mosaic, vegetation_index, risk_scores, risk_report, vegetation_model],
    jobs=[vegetation_risk],
    schedules=[nightly_vegetation_risk],
    sensors=[new_scenes],
    resources={
        "checkpoints": CheckpointStore(root=_checkpoint_root(), interval_s=0.5),
        "gang": Gang(timeout_s=600),
        "ai": AICompute(poll_interval_s=0.1),
    },
    executor=ai_executor,
)
