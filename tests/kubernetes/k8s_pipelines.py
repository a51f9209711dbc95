"""Small Dagster jobs the end-to-end tests run on the emulated cluster through `ai_executor`."""

import atexit
import os
import time
from pathlib import Path

from dagster import Definitions, OpExecutionContext, job, op

from k8s_ai_orchestrator import CheckpointStore, ai_executor, compute


@op(tags=compute(cpu=0.5, memory="256Mi"))
def hungry(context: OpExecutionContext) -> int:
    """Holds 160 MB next to the step process itself: OOM-killed at 256Mi, fine at 512Mi.

    It keeps holding for 3 s: the kernel kills at once, the kubelet stand-ins sample RSS.
    """
    print(f"hungry: attempt {os.environ.get('K8S_AI_ATTEMPT')} allocates 160 MB", flush=True)
    blocks = [bytearray(16 << 20) for _ in range(10)]
    time.sleep(3)
    context.log.info(f"held {len(blocks) * 16} MB on attempt {os.environ.get('K8S_AI_ATTEMPT')}")
    return len(blocks)


@op(tags=compute(cpu=0.5, memory="256Mi"))
def long_tile(context: OpExecutionContext, checkpoints: CheckpointStore) -> int:
    """40 units of work, checkpointed; returns the unit it resumed from.

    On its first attempt it announces itself (env EVICT_MARKER) once 10 units are saved, then
    works slowly enough for a test to evict it.
    """
    ckpt = checkpoints.open(f"eviction-test/{context.run_id}")
    state = ckpt.load()
    start = int(state["unit"]) if isinstance(state, dict) else 0
    first_attempt = os.environ.get("K8S_AI_ATTEMPT", "0") == "0"
    for unit in range(start, 40):
        time.sleep(0.5 if first_attempt and unit >= 10 else 0.01)
        ckpt.save({"unit": unit + 1}, progress=unit + 1)
        ckpt.exit_if_preempted()
        if first_attempt and unit == 9:
            Path(os.environ["EVICT_MARKER"]).write_text(context.run_id)
    return start


def _grow(mib: int) -> list[bytearray]:
    """Allocate `mib` in 4 MiB pieces, touching every page, then hold it for 1.5 s."""
    blocks = []
    for _ in range(mib // 4):
        block = bytearray(4 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        blocks.append(block)
        time.sleep(0.03)
    time.sleep(1.5)
    return blocks


@op(tags=compute(cpu=0.5, memory="1Gi"))
def grower(context: OpExecutionContext) -> int:
    """Grows from the step process's own ~100 MiB to about 3 GiB (about 25 s): past its 1Gi
    limit unless grown."""
    attempt = os.environ.get("K8S_AI_ATTEMPT")
    print(f"grower: attempt {attempt} starts", flush=True)
    blocks = _grow(2900)
    context.log.info(f"held {len(blocks) * 4} MiB on attempt {attempt}")
    return len(blocks)


@op(tags=compute(cpu=0.5, memory="auto", memory_default="2Gi"))
def auto_sized(context: OpExecutionContext) -> int:
    """Uses about 500 MiB, whatever it is given."""
    return len(_grow(400))


@job(executor_def=ai_executor)
def auto_job() -> None:
    auto_sized()


@job(executor_def=ai_executor)
def growing_job() -> None:
    grower()


@job(executor_def=ai_executor)
def oom_job() -> None:
    hungry()


@job(executor_def=ai_executor)
def eviction_job() -> None:
    long_tile()


@op(tags=compute(cpu=0.5, memory="256Mi"))
def syncs_at_exit() -> int:
    """Prints its last line when its process exits, after Dagster wrote STEP_SUCCESS (as an
    experiment tracker's final "synced" summary does)."""

    def synced() -> None:
        time.sleep(1.0)
        print("syncs_at_exit: run synced at exit", flush=True)

    atexit.register(synced)
    return 1


@job(executor_def=ai_executor)
def late_print_job() -> None:
    syncs_at_exit()


defs = Definitions(
    jobs=[oom_job, eviction_job, growing_job, auto_job, late_print_job],
    resources={
        "checkpoints": CheckpointStore(root=os.environ.get("CHECKPOINT_ROOT", "memory://k8s-e2e"))
    },
)
