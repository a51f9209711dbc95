"""Jobs whose run worker the resume tests kill: each step counts its executions in a file and
waits for the test to let it go, so the test decides what happens while no run worker watches."""

import os
import time
from pathlib import Path

from dagster import Definitions, OpExecutionContext, job, op

from k8s_ai_orchestrator import CheckpointStore, Gang, ai_executor, compute

CONFIG = {"dir": str}


def _count_and_wait(context: OpExecutionContext) -> Path:
    """Append this execution to `dir`/executions, say so in the log, wait for `dir`/release."""
    folder = Path(context.op_config["dir"])
    attempt = os.environ.get("K8S_AI_ATTEMPT", "?")
    with (folder / "executions").open("a") as out:
        out.write(f"{context.op.name} attempt {attempt}\n")
    print(f"{context.op.name}: before the release (attempt {attempt})", flush=True)
    while not (folder / "release").exists():
        time.sleep(0.1)
    return folder


# 1Gi: a Dagster step process alone can pass 256Mi (Slurm's OverMemoryKill counts its RSS)
@op(config_schema=CONFIG, tags=compute(cpu=0.5, memory="1Gi"))
def tally(context: OpExecutionContext) -> int:
    """Runs until released, then prints once more and succeeds."""
    _count_and_wait(context)
    print("tally: after the release", flush=True)
    return 1


def _hold_once_released(context: OpExecutionContext, first: int, later: int) -> int:
    """Count, wait for the release, then hold `first` MiB (attempt 0) or `later` MiB."""
    _count_and_wait(context)
    mib = first if os.environ.get("K8S_AI_ATTEMPT", "0") == "0" else later
    blocks = [bytearray(16 << 20) for _ in range(mib // 16)]
    time.sleep(3)
    return len(blocks)


@op(config_schema=CONFIG, tags=compute(cpu=0.5, memory="256Mi"))
def hungry_later(context: OpExecutionContext) -> int:
    """Once released, its first attempt holds 320 MB (OOM-killed at 256Mi); the next one
    (512Mi) holds 160 MB and succeeds."""
    return _hold_once_released(context, 320, 160)


# On Slurm a Dagster step process alone can pass 256Mi (OverMemoryKill counts its RSS)
@op(config_schema=CONFIG, tags=compute(cpu=0.5, memory="1Gi"))
def hungry_later_1gi(context: OpExecutionContext) -> int:
    """`hungry_later` at 1Gi: 1.25 GiB once released (OOM-killed), then 320 MiB at 2Gi."""
    return _hold_once_released(context, 1280, 320)


@op(config_schema=CONFIG, tags=compute(cpu=0.5, memory="256Mi"))
def hungry_first(context: OpExecutionContext) -> int:
    """Its first attempt holds 320 MB at once (OOM-killed at 256Mi); the next one (512Mi)
    counts its execution and waits for the release."""
    if os.environ.get("K8S_AI_ATTEMPT", "0") == "0":
        blocks = [bytearray(16 << 20) for _ in range(20)]
        time.sleep(60)
        return len(blocks)
    _count_and_wait(context)
    return 0


def rank_tally(folder: str) -> int:
    """One rank of `gang_tally`: counts its execution, waits for the release."""
    rank, attempt = os.environ["RANK"], os.environ.get("K8S_AI_ATTEMPT", "?")
    with (Path(folder) / "executions").open("a") as out:
        out.write(f"rank {rank} attempt {attempt}\n")
    while not (Path(folder) / "release").exists():
        time.sleep(0.1)
    return int(rank)


@op(config_schema=CONFIG, tags=compute(nodes=2, cpu=0.5, memory="1Gi"))
def gang_tally(context: OpExecutionContext, gang: Gang) -> int:
    """A 2-node gang whose every rank counts its execution and waits for the release."""
    return gang.run(rank_tally, context.op_config["dir"])


@op(config_schema=CONFIG, tags=compute(cpu=0.5, memory="1Gi", preemptible=True))
def resumable(context: OpExecutionContext, checkpoints: CheckpointStore) -> int:
    """40 checkpointed units; its first attempt works slowly once 5 are saved (and counts its
    execution then), so that a test can preempt it. Returns the unit it resumed from."""
    folder = Path(context.op_config["dir"])
    attempt = os.environ.get("K8S_AI_ATTEMPT", "?")
    with checkpoints.open(context) as ckpt:
        state = ckpt.load()
        start = int(state["unit"]) if isinstance(state, dict) else 0
        if start:
            with (folder / "executions").open("a") as out:
                out.write(f"resumable attempt {attempt} from {start}\n")
        for unit in range(start, 40):
            time.sleep(0.5 if attempt == "0" and unit >= 5 else 0.01)
            ckpt.save({"unit": unit + 1}, progress=unit + 1)
            ckpt.exit_if_preempted()
            if attempt == "0" and unit == 4:
                with (folder / "executions").open("a") as out:
                    out.write(f"resumable attempt {attempt} from {start}\n")
    return start


@job(executor_def=ai_executor, resource_defs={"checkpoints": CheckpointStore.configure_at_launch()})
def resumable_job() -> None:
    resumable()


@job(executor_def=ai_executor)
def tally_job() -> None:
    tally()


@job(executor_def=ai_executor)
def hungry_later_job() -> None:
    hungry_later()


@job(executor_def=ai_executor)
def hungry_later_1gi_job() -> None:
    hungry_later_1gi()


@job(executor_def=ai_executor)
def hungry_first_job() -> None:
    hungry_first()


@job(executor_def=ai_executor)
def gang_tally_job() -> None:
    gang_tally()


defs = Definitions(
    jobs=[
        tally_job,
        hungry_later_job,
        hungry_later_1gi_job,
        hungry_first_job,
        resumable_job,
        gang_tally_job,
    ],
    resources={"gang": Gang(straggler_timeout_s=120)},
)
