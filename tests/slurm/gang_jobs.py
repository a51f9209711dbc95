"""Assets that `ai_executor` sends to Slurm: 2-node gangs, and one step that needs more memory
than it declares (loaded by real step processes)."""

import json
import os
import signal
import time
from pathlib import Path

from dagster import Definitions, asset, define_asset_job

from k8s_ai_orchestrator import ai_executor, compute
from k8s_ai_orchestrator.gang import Gang


def describe_rank(out_dir: str) -> dict[str, str]:
    seen = {name: os.environ[name] for name in ("RANK", "WORLD_SIZE", "NODE_RANK")}
    seen["node"] = os.environ.get("SLURMD_NODENAME", "local")
    Path(out_dir, f"rank-{seen['RANK']}.json").write_text(json.dumps(seen))
    return seen


def write_started(out: Path) -> None:
    """The job id, for the test's thread to signal: renamed into place, so that the thread never
    reads the file between its creation and its write (an empty job id made scancel fail)."""
    (out / "started.tmp").write_text(os.environ["SLURM_JOB_ID"])
    os.replace(out / "started.tmp", out / "started")


@asset(op_tags=compute(nodes=2, tasks_per_node=1, cpu=1, memory="256Mi"))
def gang_model(gang: Gang) -> dict[str, str]:
    return gang.run(describe_rank, os.environ["TEST_OUT"])


@asset(op_tags=compute(nodes=2, tasks_per_node=1, cpu=1, memory="256Mi", preemptible=True))
def resumable_model() -> str:
    """Saves a 'checkpoint' on SIGUSR2; once requeued, finishes from it."""
    out = Path(os.environ["TEST_OUT"])
    if (out / "checkpoint").exists():
        return "resumed from checkpoint"
    signal.signal(signal.SIGUSR2, lambda *_: (out / "checkpoint").write_text("saved"))
    write_started(out)
    time.sleep(120)
    return "never preempted"


@asset(op_tags=compute(nodes=2, tasks_per_node=1, cpu=1, memory="256Mi"))
def relaunched_model() -> str:
    """The first attempt waits (its node is taken away); the relaunch finishes."""
    out = Path(os.environ["TEST_OUT"])
    attempt = os.environ["K8S_AI_ATTEMPT"]
    if attempt == "0":
        write_started(out)
        time.sleep(120)
    return f"attempt {attempt} on {os.environ['SLURM_JOB_NODELIST']}"


@asset(op_tags=compute(nodes=2, tasks_per_node=1, cpu=1, memory="256Mi"))
def failing_model() -> str:
    """Fails at once: a failed run whose events, logs and scripts must hold no secret."""
    raise RuntimeError("training diverged")


@asset(op_tags=compute(cpu=1, memory="256Mi"))
def hungry_model() -> str:
    """Holds 200Mi beside the step process itself (~120-180Mi): past 256Mi, within 512Mi."""
    held = bytearray(200 * 2**20)
    time.sleep(3)  # slurmstepd samples the step's memory every second
    return f"attempt {os.environ['K8S_AI_ATTEMPT']} held {len(held) >> 20}Mi"


defs = Definitions(
    assets=[gang_model, resumable_model, relaunched_model, failing_model, hungry_model],
    jobs=[
        define_asset_job("train_gang", selection=[gang_model]),
        define_asset_job("train_resumable", selection=[resumable_model]),
        define_asset_job("train_relaunched", selection=[relaunched_model]),
        define_asset_job("train_failing", selection=[failing_model]),
        define_asset_job("train_hungry", selection=[hungry_model]),
    ],
    resources={"gang": Gang(timeout_s=120)},
    executor=ai_executor,
)
