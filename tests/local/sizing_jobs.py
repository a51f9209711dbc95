"""Jobs the right-sizing tests run through `ai_executor` in real step processes.

Each op records its pid and attempt into the folder named by env TEST_OUT, and grows its
memory gradually (as real steps do), so the backend's sampling sees it pass the threshold.
"""

import json
import os
import time
from pathlib import Path

from dagster import Definitions, OpExecutionContext, job, op

from k8s_ai_orchestrator import ai_executor, compute

OUT = Path(os.environ.get("TEST_OUT", "/tmp"))
MiB = 1024**2
GROW_BY_MIB = int(os.environ.get("TEST_GROW_BY_MIB", "300"))  # memory added on top of the step


def _record(name: str, **fields: object) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"name": name, "pid": os.getpid(), "t": time.time(), **fields})
    with open(OUT / "events.jsonl", "a") as f:
        f.write(line + "\n")


def grow_gradually(total_mib: int, step_mib: int = 4, pause_s: float = 0.03) -> list[bytearray]:
    """Allocate `total_mib` in `step_mib` pieces, touching every page, pausing in between."""
    blocks = []
    for _ in range(total_mib // step_mib):
        block = bytearray(step_mib * MiB)
        for i in range(0, len(block), 4096):
            block[i] = 1
        blocks.append(block)
        time.sleep(pause_s)
    return blocks


@op(tags=compute(cpu=1, memory="256Mi"))
def grower(context: OpExecutionContext) -> None:
    attempt = int(os.environ.get("K8S_AI_ATTEMPT", "0"))
    _record("grower", attempt=attempt, phase="start")
    held = grow_gradually(GROW_BY_MIB)
    time.sleep(0.5)
    _record("grower", attempt=attempt, phase="end", held_mib=len(held) * 4)


@job(executor_def=ai_executor)
def growing() -> None:
    grower()


@op(tags=compute(cpu="auto", memory="auto", memory_default="2Gi", cpu_default=1))
def auto_sized(context: OpExecutionContext) -> None:
    _record("auto_sized", attempt=int(os.environ.get("K8S_AI_ATTEMPT", "0")))
    grow_gradually(GROW_BY_MIB)
    time.sleep(0.5)


@job(executor_def=ai_executor)
def auto() -> None:
    auto_sized()


defs = Definitions(jobs=[growing, auto])
