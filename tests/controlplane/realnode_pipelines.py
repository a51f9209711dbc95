"""Jobs the executor runs on the real node: a step that prints; one that outgrows its memory
limit on its first attempt only (the kernel's OOM killer ends it); one that grows; one that
overfills its emptyDir on its first attempt (the kubelet evicts it) and resumes from its
checkpoint."""

import json
import os
import sys
import time
from pathlib import Path

from dagster import AssetExecutionContext, OpExecutionContext, asset, job, op

from k8s_ai_orchestrator import AICompute, CheckpointStore, ai_executor, compute

GROWS = str(Path(__file__).parent / "programs" / "grows.py")


@op(tags=compute(cpu=0.5, memory="512Mi"))
def hello() -> int:
    """Prints a line and succeeds."""
    print("hello from a step on a real kubelet", flush=True)
    return 1


@op(tags=compute(cpu=0.5, memory="512Mi"))
def outgrows() -> int:
    """Attempt 0 writes 768 MiB into its 512Mi; the next attempt (1Gi) writes 64 MiB."""
    attempt = os.environ.get("K8S_AI_ATTEMPT", "0")
    mib = 768 if attempt == "0" else 64
    print(f"outgrows: attempt {attempt} writes {mib} MiB", flush=True)
    blocks = [b"x" * (16 << 20) for _ in range(mib // 16)]
    return len(blocks)


@job(executor_def=ai_executor)
def hello_job() -> None:
    hello()


@job(executor_def=ai_executor)
def outgrows_job() -> None:
    outgrows()


@op(tags=compute(cpu=0.5, memory="1Gi"))
def grower() -> int:
    """Grows from the step process's own ~100 MiB to about 1.4 GiB, 4 MiB at a time with every
    page touched (about 12 s): past its 1Gi limit unless grown in place."""
    print(f"grower: attempt {os.environ.get('K8S_AI_ATTEMPT')} starts", flush=True)
    blocks = []
    for _ in range(1300 // 4):
        block = bytearray(4 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        blocks.append(block)
        time.sleep(0.03)
    time.sleep(1.5)
    return len(blocks)


@job(executor_def=ai_executor)
def growing_job() -> None:
    grower()


# A 1Mi emptyDir at /scratch, through the step's own dagster-k8s/config tag.
SCRATCH = {
    "pod_spec_config": {"volumes": [{"name": "scratch", "empty_dir": {"size_limit": "1Mi"}}]},
    "container_config": {"volume_mounts": [{"name": "scratch", "mount_path": "/scratch"}]},
}


@op(tags={**compute(cpu=0.5, memory="512Mi"), "dagster-k8s/config": json.dumps(SCRATCH)})
def fills_scratch(context: OpExecutionContext, checkpoints: CheckpointStore) -> int:
    """20 units of work, each checkpointed; returns the unit it resumed from. On its first
    attempt, once 10 units are saved, it writes 8 MiB into its 1Mi emptyDir and waits for the
    kubelet's eviction."""
    ckpt = checkpoints.open(f"real-node/{context.run_id}")
    state = ckpt.load()
    start = int(state["unit"]) if isinstance(state, dict) else 0
    for unit in range(start, 20):
        time.sleep(0.05)
        ckpt.save({"unit": unit + 1}, progress=unit + 1)
        if os.environ.get("K8S_AI_ATTEMPT") == "0" and unit == 9:
            Path("/scratch/fill").write_bytes(b"x" * (8 << 20))
            print("fills_scratch: 8 MiB written into a 1Mi emptyDir", flush=True)
            time.sleep(300)
    return start


@job(
    executor_def=ai_executor,
    resource_defs={"checkpoints": CheckpointStore.configure_at_launch()},
)
def scratch_job() -> None:
    fills_scratch()


@asset
def grown(context: AssetExecutionContext, ai: AICompute):  # noqa: ANN201
    """Runs programs/grows.py (720 MiB, not reporting its memory) at 1Gi through `ai`."""
    invocation = ai.run(
        context=context,
        command=[sys.executable, GROWS],
        env={"GROW_MIB": "720"},
        cpu=0.5,
        memory="1Gi",
    )
    return invocation.get_results()


@op(tags=compute(cpu=1, memory="1Gi"))
def burns() -> int:
    """Holds 300 MiB (every page touched) while it burns 3 CPU-seconds, then holds it 20 s
    more: long enough for the kubelet's stats to catch up with both."""
    block = bytearray(300 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    start = time.process_time()
    while time.process_time() - start < 3:
        block[0] = (block[0] + 1) % 256
    time.sleep(20)
    return len(block)


@job(executor_def=ai_executor)
def burns_job() -> None:
    burns()
