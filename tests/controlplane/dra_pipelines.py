"""Jobs the DRA tests run: GPU steps that report the devices their pod was given."""

import json
import os
import time
from pathlib import Path

from dagster import Config, OpExecutionContext, job, op

from k8s_ai_orchestrator import Gang, ai_executor, compute
from k8s_ai_orchestrator.stepenv import NODE_NAME

H100 = "nvidia-h100-80gb-hbm3"  # NVIDIA's "NVIDIA H100 80GB HBM3", label-style


@op(tags=compute(cpu=0.5, memory="512Mi", gpu=2, gpu_type=H100))
def two_h100() -> dict[str, str]:
    """The visible-device environment the node's DRA driver gave the step."""
    names = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
    return {name: os.environ.get(name, "") for name in names}


@op(tags=compute(cpu=0.5, memory="512Mi", gpu=1, gpu_type="nvidia-b200"))
def one_b200() -> None:
    """Asks for a model no node has."""


@job(executor_def=ai_executor)
def two_h100_job() -> None:
    two_h100()


@job(executor_def=ai_executor)
def one_b200_job() -> None:
    one_b200()


FOUR_H100 = compute(cpu=0.5, memory="512Mi", gpu=4, gpu_type=H100)  # a node's whole pool


def _holds_four() -> str:
    """Holds its four GPUs a few seconds; the devices it was given."""
    time.sleep(3)
    return os.environ.get("NVIDIA_VISIBLE_DEVICES", "")


@op(tags=FOUR_H100)
def four_h100_a() -> str:
    return _holds_four()


@op(tags=FOUR_H100)
def four_h100_b() -> str:
    return _holds_four()


@job(executor_def=ai_executor)
def two_full_nodes_job() -> None:
    four_h100_a()
    four_h100_b()


GANG_OF_TWO = compute(nodes=2, gpus_per_node=1, cpu=0.5, memory="512Mi")  # a GPU on each node


class DevicesOut(Config):
    out_dir: str  # where each rank writes the devices its pod was given


def record_devices(out_dir: str) -> None:
    """A rank: its node and the devices its pod's claim holds, in `<out_dir>/rank-<RANK>`."""
    seen = {"node": os.environ.get(NODE_NAME, ""), **_visible()}
    Path(out_dir, f"rank-{os.environ['RANK']}").write_text(json.dumps(seen))


def _visible() -> dict[str, str]:
    names = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
    return {name: os.environ.get(name, "") for name in names}


@op(tags=GANG_OF_TWO)
def gang_gpus(config: DevicesOut, gang: Gang) -> None:
    """Every rank records the devices its own pod was allocated."""
    gang.run(record_devices, config.out_dir)


@job(executor_def=ai_executor, resource_defs={"gang": Gang(straggler_timeout_s=120)})
def gang_gpus_job() -> None:
    gang_gpus()


@op(tags=compute(nodes=2, gpus_per_node=1, cpu=0.5, memory="512Mi", gpu_type=H100))
def gang_h100(gang: Gang) -> None:
    """Asks for an H100 on each of two nodes: only one node has them."""


@job(executor_def=ai_executor, resource_defs={"gang": Gang(straggler_timeout_s=120)})
def gang_h100_job() -> None:
    gang_h100()


MIG_1G = compute(cpu=0.5, memory="256Mi", gpu=1, gpu_type=H100, gpu_partition="1g.10gb")


def _record_attempt(context: OpExecutionContext) -> str:
    """Record the devices this attempt was given in `<out_dir>/attempt-<N>`; N."""
    attempt = os.environ.get("K8S_AI_ATTEMPT", "0")
    Path(context.op_config["out_dir"], f"attempt-{attempt}").write_text(json.dumps(_visible()))
    return attempt


@op(config_schema={"out_dir": str}, tags=MIG_1G)
def mig_hungry(context: OpExecutionContext) -> int:
    """A 1g.10gb partition step: each attempt records the devices it was given; the first
    then holds 320 MB (OOM-killed at 256Mi), the next (512Mi) succeeds."""
    if _record_attempt(context) == "0":
        blocks = [bytearray(16 << 20) for _ in range(20)]
        time.sleep(60)
        return len(blocks)
    return 0


@job(executor_def=ai_executor)
def mig_hungry_job() -> None:
    mig_hungry()


MIG_3G = compute(
    cpu=0.5, memory="512Mi", gpu=1, gpu_type=H100, gpu_partition="3g.40gb", gpu_memory="40Gi"
)


@op(config_schema={"out_dir": str}, tags=MIG_3G)
def mig_evicted(context: OpExecutionContext) -> int:
    """A 3g.40gb partition step with at least 40Gi: each attempt records the devices it was
    given; the first then waits to be evicted, the next succeeds."""
    attempt = _record_attempt(context)
    if attempt == "0":
        time.sleep(120)
    return int(attempt)


@job(executor_def=ai_executor)
def mig_evicted_job() -> None:
    mig_evicted()


@op(config_schema={"out_dir": str}, tags={**MIG_1G, **compute(preemptible=True)})
def mig_preemptible(context: OpExecutionContext) -> int:
    """A preemptible 1g.10gb partition step: each attempt records the devices it was given;
    the first then waits to be preempted, the next succeeds."""
    attempt = _record_attempt(context)
    if attempt == "0":
        time.sleep(120)
    return int(attempt)


@job(executor_def=ai_executor)
def mig_preemptible_job() -> None:
    mig_preemptible()
