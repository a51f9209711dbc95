"""Jobs the local-backend integration tests run through `ai_executor` in real step processes.

Each op writes what it observed into the folder named by env TEST_OUT, so tests can assert
on order and attempts without timing anything.
"""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from dagster import (
    Definitions,
    DynamicOut,
    DynamicOutput,
    OpExecutionContext,
    RetryPolicy,
    job,
    op,
)

from k8s_ai_orchestrator import AICompute, CheckpointStore, ai_executor, compute
from k8s_ai_orchestrator.backends.local import AdmissionLedger

OUT = Path(os.environ.get("TEST_OUT", "/tmp"))


def _record(name: str, **fields: object) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"name": name, "pid": os.getpid(), "t": time.time(), **fields})
    with open(OUT / "events.jsonl", "a") as f:
        f.write(line + "\n")


def _span(name: str, seconds: float) -> None:
    _record(name, phase="start")
    time.sleep(seconds)
    _record(name, phase="end")


@op(tags=compute(cpu=1, memory="256Mi"))
def one_cpu_a() -> None:
    _span("one_cpu_a", 1.5)


@op(tags=compute(cpu=1, memory="256Mi"))
def one_cpu_b() -> None:
    _span("one_cpu_b", 1.5)


@op(tags=compute(cpu=2, memory="256Mi"))
def two_cpu() -> None:
    _span("two_cpu", 1.5)


@job(executor_def=ai_executor)
def admission() -> None:
    one_cpu_a()
    one_cpu_b()
    two_cpu()


def _allocate(mib: int) -> int:
    block = bytearray(mib * 1024 * 1024)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(1.0)
    return len(block)


@op(tags=compute(cpu=1, memory="256Mi"))
def hog_600mi(context: OpExecutionContext) -> None:
    _record("hog", attempt=int(os.environ.get("K8S_AI_ATTEMPT", "0")))
    _allocate(600)


@job(executor_def=ai_executor)
def oom() -> None:
    hog_600mi()


@op(tags=compute(cpu=1, memory="256Mi"), retry_policy=RetryPolicy(max_retries=1))
def preempted_then_flaky(context: OpExecutionContext) -> None:
    attempt = int(os.environ.get("K8S_AI_ATTEMPT", "0"))
    _record("flaky", attempt=attempt, retry_number=context.retry_number)
    if attempt == 0:
        (OUT / "preempt-me").write_text(str(os.getpid()))
        time.sleep(60)
    if not (OUT / "failed-once").exists():
        (OUT / "failed-once").write_text("1")
        raise RuntimeError("a flaky user error, retried by the op's RetryPolicy")


@job(executor_def=ai_executor)
def preemption() -> None:
    preempted_then_flaky()


@op(tags=compute(cpu=1, memory="256Mi"))
def checkpointed_tiles(context: OpExecutionContext, checkpoints: CheckpointStore) -> int:
    """40 units, saved after each; the first attempt announces itself after 10 and slows down.

    The loop never calls `exit_if_preempted()`: `save()` stops the step after a preemption
    notice, and under ai_executor that reads as a relaunch, not a failure.
    """
    attempt = int(os.environ.get("K8S_AI_ATTEMPT", "0"))
    ckpt = checkpoints.open(context)
    state = ckpt.load()
    start = int(state["unit"]) if isinstance(state, dict) else 0
    _record("tiles", attempt=attempt, start=start)
    for unit in range(start, 40):
        time.sleep(0.3 if attempt == 0 and unit >= 10 else 0.01)
        ckpt.save({"unit": unit + 1}, progress=unit + 1)
        if attempt == 0 and unit == 9:
            (OUT / "preempt-me").write_text(str(os.getpid()))
    return start


@job(
    executor_def=ai_executor,
    resource_defs={"checkpoints": CheckpointStore(root=f"file://{OUT}/checkpoints")},
)
def checkpointed_preemption() -> None:
    checkpointed_tiles()


@job(
    executor_def=ai_executor,
    resource_defs={"checkpoints": CheckpointStore(root=f"file://{OUT}/checkpoints")},
)
def oom_and_preemption() -> None:
    """One run that wastes both ways: an OOM relaunch and a preemption."""
    hog_600mi()
    checkpointed_tiles()


@op(tags=compute(cpu=1, memory="512Mi"))
def spawns_children() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    _record("children", child=child.pid)
    time.sleep(600)


@job(executor_def=ai_executor)
def long_running() -> None:
    spawns_children()


@op(tags=compute("gpu-1"))
def wants_gpu() -> None:
    _record("gpu", cuda=os.environ.get("CUDA_VISIBLE_DEVICES"))


@op(tags={"k8s_ai/cpu": "lots"})
def hand_edited() -> None:
    _record("hand_edited")


@job(executor_def=ai_executor)
def gpu_on_cpu_machine() -> None:
    wants_gpu()


@op(tags=compute(gpu=1, gpu_partition="1g.10gb"))
def wants_partition() -> None:
    _record("partition")


@job(executor_def=ai_executor)
def gpu_partition_locally() -> None:
    wants_partition()


@job(executor_def=ai_executor)
def bad_tags() -> None:
    wants_gpu()
    hand_edited()


@op(tags=compute("xs", tenant="vision"))
def vision_step() -> None:
    _record("vision_step")


@job(executor_def=ai_executor)
def tenant_routed() -> None:
    one_cpu_a()
    vision_step()


def _other_run_waits_or_ended(run_id: str) -> bool:
    waiting = AdmissionLedger().snapshot().waiters
    if any(w.run_id != run_id for w in waiting):
        return True
    events = OUT / "events.jsonl"
    lines = events.read_text().splitlines() if events.exists() else []
    return any(e.get("phase") == "end" and e["name"] != run_id for e in map(json.loads, lines))


@op(tags=compute(cpu=2, memory="256Mi"))
def two_cpu_beside_another_run(context: OpExecutionContext) -> None:
    """Holds its 2 CPUs until the other run's 2-CPU step is queued behind it (or has run).

    So the two runs are known to overlap while this step runs, on however loaded a machine;
    the bound only ends the wait when admission is broken and both steps started at once.
    """
    _record(context.run_id, phase="start")
    deadline = time.monotonic() + 120
    while not _other_run_waits_or_ended(context.run_id) and time.monotonic() < deadline:
        time.sleep(0.1)
    _record(context.run_id, phase="end")


@job(executor_def=ai_executor)
def machine_wide() -> None:
    two_cpu_beside_another_run()


@op(tags=compute(cpu=2, memory="256Mi"))
def step_running_a_command(context: OpExecutionContext, ai: AICompute) -> None:
    """Holds the whole 2-CPU machine while its Pipes command (1 CPU) runs: the command must
    not queue behind its own waiting parent."""
    program = "from dagster_pipes import open_dagster_pipes\nwith open_dagster_pipes(): pass\n"
    ai.run(context=context, command=[sys.executable, "-c", program], cpu=1, memory="128Mi")
    _record("step_running_a_command", phase="end")


@job(executor_def=ai_executor)
def command_in_a_full_machine() -> None:
    step_running_a_command()


@op(out=DynamicOut(int), tags=compute(cpu=0.5, memory="256Mi"))
def emit_tiles():  # type: ignore[no-untyped-def]
    for i in range(3):
        yield DynamicOutput(i, mapping_key=f"t{i}")


@op(tags=compute(cpu=0.5, memory="256Mi"))
def square(x: int) -> int:
    return x * x


@op(tags=compute(cpu=0.5, memory="256Mi"))
def base() -> int:
    return 100


@op(tags=compute(cpu=0.5, memory="256Mi"))
def total(squares: list[int], offset: int) -> int:
    return sum(squares) + offset


@job(executor_def=ai_executor)
def dynamic_fan_out() -> None:
    """Inputs from a mapped output, a collect and a plain upstream: each step's process loads
    them from the part of the run's known state it is given (`loop.known_state_for`)."""
    total(emit_tiles().map(square).collect(), base())


@op(tags=compute(cpu=1, memory="1Gi"))
def measured_work() -> None:
    """Burns 3 s of CPU, then holds 300 MiB (every page touched) for 1.5 s, then records the
    kernel's own account of this step process (CPU time from getrusage, peak RSS from VmHWM)
    plus its helper processes' (Dagster's log tailers: CPU time and RSS now, from /proc)."""
    import resource

    import psutil

    end = time.process_time() + 3.0
    while time.process_time() < end:
        pass
    block = bytearray(300 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(1.5)
    used = resource.getrusage(resource.RUSAGE_SELF)
    # the peak: VmHWM, this process's high-water RSS (getrusage's ru_maxrss is not: it keeps
    # the spawning process's peak across the exec)
    status = Path("/proc/self/status").read_text()
    hwm = next(
        int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmHWM:")
    )
    helpers = psutil.Process().children(recursive=True)
    helper_cpu = sum(sum(h.cpu_times()[:2]) for h in helpers)
    helper_rss = sum(h.memory_info().rss for h in helpers)
    cpu = used.ru_utime + used.ru_stime + helper_cpu
    _record("rusage", cpu=cpu, maxrss=hwm + helper_rss, helpers=len(helpers))


@job(executor_def=ai_executor)
def measured() -> None:
    measured_work()


@op(tags=compute(cpu=1, memory="2Gi"))
def spike() -> None:
    """Fills 600 MiB in one go and frees it at once (a spike of a fraction of a second), then
    idles 1 s; records the kernel's peak RSS (VmHWM) and the RSS left after the spike."""
    block = b"\x01" * (600 << 20)
    del block
    status = Path("/proc/self/status").read_text()
    fields = {
        line.split(":")[0]: int(line.split()[1]) * 1024
        for line in status.splitlines()
        if line.startswith(("VmHWM:", "VmRSS:"))
    }
    _record("spike", hwm=fields["VmHWM"], rss=fields["VmRSS"])
    time.sleep(1.0)


@job(executor_def=ai_executor)
def spiking() -> None:
    spike()


defs = Definitions(
    resources={"ai": AICompute(local={"cpus": 2, "memory": "4Gi"}, poll_interval_s=0.1)},
    jobs=[
        command_in_a_full_machine,
        admission,
        oom,
        preemption,
        checkpointed_preemption,
        oom_and_preemption,
        long_running,
        gpu_on_cpu_machine,
        gpu_partition_locally,
        bad_tags,
        tenant_routed,
        machine_wide,
        dynamic_fan_out,
        measured,
        spiking,
    ],
)
