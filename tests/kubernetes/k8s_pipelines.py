"""Small Dagster jobs the end-to-end tests run on the emulated cluster through `ai_executor`."""

import os
import time

from dagster import Definitions, OpExecutionContext, job, op

from k8s_ai_orchestrator import ai_executor, compute


@op(tags=compute(cpu=0.5, memory="256Mi"))
def hungry(context: OpExecutionContext) -> int:
    """Holds 160 MB next to the step process itself: OOM-killed at 256Mi, fine at 512Mi."""
    blocks = [bytearray(16 << 20) for _ in range(10)]
    context.log.info(f"held {len(blocks) * 16} MB on attempt {os.environ.get('K8S_AI_ATTEMPT')}")
    return len(blocks)


@op(tags=compute(cpu=0.5, memory="256Mi"))
def long_tile(context: OpExecutionContext) -> str:
    """Runs long enough on its first attempt for a test to evict it."""
    if os.environ.get("K8S_AI_ATTEMPT", "0") == "0":
        context.log.info("first attempt: working")
        time.sleep(60)
    return "done"


@job(executor_def=ai_executor)
def oom_job() -> None:
    hungry()


@job(executor_def=ai_executor)
def eviction_job() -> None:
    long_tile()


defs = Definitions(jobs=[oom_job, eviction_job])
