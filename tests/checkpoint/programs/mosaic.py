"""A checkpointed, partitioned asset that walks 60 work units; run as a script it materializes.

argv: root, progress log path. Each finished unit appends "done <unit>" to the log, so a test
knows how far the step got before it sent SIGTERM.
"""

import json
import os
import sys
import time

from dagster import (
    AssetExecutionContext,
    Definitions,
    EnvVar,
    MaterializeResult,
    StaticPartitionsDefinition,
    asset,
    define_asset_job,
    materialize,
)

from k8s_ai_orchestrator.checkpoint import CheckpointStore

UNITS = 60
UNIT_S = 0.05
INTERVAL_S = 0.5  # about 10 units between interval saves
PARTITIONS = StaticPartitionsDefinition(["eu", "us"])


@asset(partitions_def=PARTITIONS, code_version="v1")
def mosaic(context: AssetExecutionContext, checkpoints: CheckpointStore) -> MaterializeResult:
    progress_log = os.environ["MOSAIC_PROGRESS_LOG"]
    with checkpoints.open(context) as ckpt:
        state = ckpt.load() or {"next": 0, "total": 0}
        for unit in range(state["next"], UNITS):
            time.sleep(UNIT_S)
            state = {"next": unit + 1, "total": state["total"] + unit}
            with open(progress_log, "a") as log:
                log.write(f"done {unit}\n")
            if ckpt.due():
                ckpt.save(state, progress=state["next"])
                ckpt.exit_if_preempted()
        return MaterializeResult(metadata={**ckpt.resume_metadata(), "total": state["total"]})


def store() -> CheckpointStore:
    return CheckpointStore(root=EnvVar("MOSAIC_ROOT"), interval_s=INTERVAL_S)


defs = Definitions(
    assets=[mosaic],
    jobs=[define_asset_job("mosaic_job", selection=[mosaic])],
    resources={"checkpoints": store()},
)


if __name__ == "__main__":
    result = materialize(
        [mosaic], resources={"checkpoints": store()}, partition_key="eu", raise_on_error=False
    )
    if not result.success:
        failure = result.get_step_failure_events()[0].step_failure_data.error
        print(json.dumps({"success": False, "error": failure.to_string() if failure else ""}))
        sys.exit(1)
    (event,) = result.get_asset_materialization_events()
    metadata = {k: v.value for k, v in event.materialization.metadata.items()}
    print(json.dumps({"success": True, "metadata": metadata}, default=str))
