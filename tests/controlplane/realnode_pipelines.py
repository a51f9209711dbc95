"""Jobs the executor runs on the real node: a step that prints, and one that outgrows its
memory limit on its first attempt only (the kernel's OOM killer ends it)."""

import os
import time

from dagster import job, op

from k8s_ai_orchestrator import ai_executor, compute


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
