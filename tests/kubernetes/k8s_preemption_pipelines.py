"""Dagster jobs for the scheduler-preemption end-to-end test: the Kueue test's checkpointed
`embed` (it stops itself on SIGTERM) and 2-node `train` gang, and `hold`, a preemptible 4-GPU
step with no checkpoint whose SIGTERM only interrupts it (the backend sees its pod go first)."""

import os
import time
from pathlib import Path

from dagster import Definitions, OpExecutionContext, RetryPolicy, job, op
from k8s_kueue_pipelines import defs as kueue_defs
from k8s_kueue_pipelines import embed, train

from k8s_ai_orchestrator import ai_executor, compute


@op(
    tags=compute(gpu=4, cpu=0.5, memory="1Gi", preemptible=True),
    retry_policy=RetryPolicy(max_retries=0),
)
def hold(context: OpExecutionContext) -> int:
    """Announces itself (env HOLD_MARKER) and sleeps on its first attempt; then returns."""
    attempt = int(os.environ.get("K8S_AI_ATTEMPT", "0"))
    if attempt == 0:
        Path(os.environ["HOLD_MARKER"]).write_text(context.run_id)
        time.sleep(300)
    return attempt


@job(executor_def=ai_executor)
def embed_job() -> None:
    embed()


@job(executor_def=ai_executor)
def hold_job() -> None:
    hold()


@job(executor_def=ai_executor)
def train_job() -> None:
    train()


defs = Definitions(jobs=[embed_job, hold_job, train_job], resources=kueue_defs.resources)
