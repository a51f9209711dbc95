"""A Dagster job with one 2-node gang step, for the end-to-end gang tests on the emulator."""

import os
import time
from pathlib import Path

from dagster import Definitions, OpExecutionContext, RetryPolicy, job, op

from k8s_ai_orchestrator import CheckpointStore, Gang, ai_executor, compute


def hold(seconds: float) -> None:
    """A rank that works for `seconds` (long enough for a test to disrupt its pod)."""
    time.sleep(seconds)


def world_size() -> int:
    return int(os.environ["WORLD_SIZE"])


@op(tags=compute(nodes=2, cpu=0.5, memory="2Gi"), retry_policy=RetryPolicy(max_retries=0))
def train(context: OpExecutionContext, checkpoints: CheckpointStore, gang: Gang) -> dict:
    """Saves epoch 5, announces itself (env EVICT_MARKER) and holds its ranks on the first
    attempt; a later attempt resumes from the checkpoint and returns where it started."""
    ckpt = checkpoints.open(f"gang-test/{context.run_id}")
    state = ckpt.load()
    resumed = int(state["epoch"]) if isinstance(state, dict) else 0
    if os.environ.get("K8S_AI_ATTEMPT", "0") == "0":
        ckpt.save({"epoch": 5})
        Path(os.environ["EVICT_MARKER"]).write_text(context.run_id)
        gang.run(hold, 600)
    return {"resumed_from": resumed, "world_size": gang.run(world_size)}


@job(executor_def=ai_executor)
def gang_job() -> None:
    train()


defs = Definitions(
    jobs=[gang_job],
    resources={
        "checkpoints": CheckpointStore(root=os.environ.get("CHECKPOINT_ROOT", "memory://gang")),
        "gang": Gang(straggler_timeout_s=120),
    },
)
