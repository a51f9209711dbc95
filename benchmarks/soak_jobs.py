"""The soak benchmark's job: three parallel steps that each count their execution in a file and
then work for `seconds`; the same ops under `ai_executor` and dagster-k8s's `k8s_job_executor`."""

import os
import time
from pathlib import Path

from dagster import Definitions, OpExecutionContext, graph, op
from dagster_k8s import k8s_job_executor

from k8s_ai_orchestrator import ai_executor, compute

STEPS = 3
CONFIG = {"dir": str, "seconds": float}


def _step(i: int):  # type: ignore[no-untyped-def]
    @op(name=f"soak_{i}", config_schema=CONFIG, tags=compute(cpu=0.5, memory="512Mi"))
    def step(context: OpExecutionContext) -> int:
        attempt = os.environ.get("K8S_AI_ATTEMPT", "?")
        with (Path(context.op_config["dir"]) / "executions").open("a") as out:
            out.write(f"{context.op.name} {attempt}\n")
        time.sleep(context.op_config["seconds"])
        return i

    return step


@graph
def soak() -> None:
    for i in range(STEPS):
        _step(i)()


soak_ai = soak.to_job(name="soak_ai", executor_def=ai_executor)
soak_k8s = soak.to_job(name="soak_k8s", executor_def=k8s_job_executor)

defs = Definitions(jobs=[soak_ai, soak_k8s])
