"""A batch and its checkpointed total: what the no-stale-result runs materialize
(tests/checkpoint/reruns.py drives them on every backend).

`total` sums the batch one unit at a time and commits after each unit. Its config can stop
it once, on the first attempt that finds no marker file: `how="fail"` raises (the run
fails; a re-execution resumes), `how="preempt"` sends the step process SIGTERM, so its next
save commits and raises `Preempted` (the executor relaunches it; the attempt resumes).
"""

import os
import signal
from pathlib import Path

from dagster import (
    AssetExecutionContext,
    Config,
    Definitions,
    MaterializeResult,
    asset,
    define_asset_job,
)

from k8s_ai_orchestrator import CheckpointStore, ai_executor, compute

UNITS = 10


class BatchConfig(Config):
    value: int  # every unit of the batch holds this value


class TotalConfig(Config):
    stop_at: int = -1  # stop once before this unit (the units before it are committed)
    how: str = "fail"  # "fail" | "preempt"
    marker: str = ""  # the stop happens only while this file does not exist


@asset
def batch(config: BatchConfig) -> list[int]:
    return [config.value] * UNITS


@asset(code_version="v1", op_tags=compute(cpu=0.5, memory="512Mi"))
def total(
    context: AssetExecutionContext,
    config: TotalConfig,
    batch: list[int],
    checkpoints: CheckpointStore,
) -> MaterializeResult:
    with checkpoints.open(context) as ckpt:
        state = ckpt.load() or {"next": 0, "sum": 0}
        resumed_from = state["next"]
        for unit in range(state["next"], UNITS):
            if unit == config.stop_at and not Path(config.marker).exists():
                Path(config.marker).write_text(context.run_id)
                if config.how == "fail":
                    raise RuntimeError(f"total stops on purpose before unit {unit}")
                os.kill(os.getpid(), signal.SIGTERM)  # the next save commits, then stops
            state = {"next": unit + 1, "sum": state["sum"] + batch[unit]}
            ckpt.save(state, progress=unit + 1)
    return MaterializeResult(metadata={"total": state["sum"], "resumed_from": resumed_from})


batch_and_total = define_asset_job("batch_and_total", [batch, total], executor_def=ai_executor)

defs = Definitions(
    assets=[batch, total],
    jobs=[batch_and_total],
    resources={
        "checkpoints": CheckpointStore(root=os.environ.get("RERUN_CHECKPOINTS", "memory://unset"))
    },
)
