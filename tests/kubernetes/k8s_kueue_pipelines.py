"""Two Dagster jobs for the Kueue end-to-end test: a preemptible 4-GPU step that saves its
checkpoint when told it is preempted, and a 2-node gang that needs every GPU of the pool."""

import os
import time
from pathlib import Path

from dagster import Definitions, OpExecutionContext, RetryPolicy, job, op

from k8s_ai_orchestrator import CheckpointStore, Gang, ai_executor, compute

UNITS = 300  # of 0.05 s each: a 15 s window in which the gang arrives


def world_size() -> int:
    return int(os.environ["WORLD_SIZE"])


@op(
    tags=compute(gpu=4, cpu=0.5, memory="1Gi", preemptible=True),
    retry_policy=RetryPolicy(max_retries=0),
)
def embed(context: OpExecutionContext, checkpoints: CheckpointStore) -> dict:
    """Works through UNITS units, announcing itself (env EMBED_MARKER) at unit 3 of its first
    attempt; saves on the preemption notice and resumes from there."""
    ckpt = checkpoints.open(f"kueue-embed/{context.run_id}")
    state = ckpt.load()
    start = int(state["unit"]) if isinstance(state, dict) else 0
    for unit in range(start, UNITS):
        time.sleep(0.05)
        if unit == 3 and os.environ.get("K8S_AI_ATTEMPT", "0") == "0":
            Path(os.environ["EMBED_MARKER"]).write_text(context.run_id)
        if ckpt.due():
            ckpt.save({"unit": unit + 1}, progress=unit + 1)
    return {"resumed_from": start}


@op(
    tags=compute(nodes=2, cpu=0.5, memory="1Gi", gpus_per_node=4),
    retry_policy=RetryPolicy(max_retries=0),
)
def train(gang: Gang) -> int:
    return gang.run(world_size)


@job(executor_def=ai_executor)
def embed_job() -> None:
    embed()


@job(executor_def=ai_executor)
def train_job() -> None:
    train()


defs = Definitions(
    jobs=[embed_job, train_job],
    resources={
        "checkpoints": CheckpointStore(root=os.environ.get("CHECKPOINT_ROOT", "memory://kueue")),
        "gang": Gang(straggler_timeout_s=120),
    },
)
