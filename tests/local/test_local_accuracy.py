"""The local backend's measured figures agree with the kernel's own account of the step.

The step (`measured_work`, tests/local/jobs.py) records, as it ends, its CPU time (`getrusage`)
and its peak RSS (`VmHWM`) as the kernel counted them, plus what its helper processes
(Dagster's log tailers, which a cgroup would charge too) have used and hold, from /proc. The
step's summary, from the backend's sampling of its process tree, must agree: CPU-seconds
within max(2 %, 1 s) (the step spends a little more after its record, on Dagster's closing
events), peak memory within 5 %. Real instance, real step process. A spike shorter than the
sampling interval counts too: the backend reads the step process's own high-water mark, as a
cgroup's `memory.peak` keeps one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dagster import DagsterEventType, DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository

JOBS = ReconstructableRepository.for_module(
    "tests.local.jobs", "defs", working_directory=str(Path(__file__).parents[2])
)


def summary(instance: DagsterInstance, run_id: str, step: str) -> dict:
    [meta] = [
        {k: v.value for k, v in r.dagster_event.engine_event_data.metadata.items()}  # type: ignore[union-attr]
        for r in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
        if (r.dagster_event.message or "").startswith(f"Step '{step}' reserved")  # type: ignore[union-attr]
    ]
    return meta


def run(instance: DagsterInstance, test_out: Path, job: str, record: str) -> tuple[Any, dict]:
    """Run `job` on the local backend; its result and what its step recorded as `record`."""
    result = execute_job(
        JOBS.get_reconstructable_job(job),
        instance=instance,
        run_config={"execution": {"config": {"local": {"cpus": 2, "memory": "4Gi"}}}},
        raise_on_error=False,
    )
    assert result.success
    lines = (test_out / "events.jsonl").read_text().splitlines()
    [kernel] = [e for e in map(json.loads, lines) if e["name"] == record]
    return result, kernel


def test_cpu_seconds_and_peak_memory_agree_with_the_kernels_rusage(
    instance: DagsterInstance, test_out: Path
) -> None:
    result, kernel = run(instance, test_out, "measured", "rusage")
    meta = summary(instance, result.run_id, "measured_work")
    cpu = float(meta["k8s_ai/cpu_used_seconds"])
    assert kernel["cpu"] >= 3.0
    assert abs(cpu - kernel["cpu"]) <= max(0.02 * kernel["cpu"], 1.0), (cpu, kernel)
    peak = int(meta["k8s_ai/peak_memory_bytes"])
    assert abs(peak - kernel["maxrss"]) <= 0.05 * kernel["maxrss"], f"{peak} {kernel}"


def test_a_spike_between_two_samples_is_in_the_peak(instance: DagsterInstance, test_out: Path):
    result, kernel = run(instance, test_out, "spiking", "spike")
    assert kernel["hwm"] - kernel["rss"] >= 500 << 20  # it was a spike, gone once recorded
    peak = int(summary(instance, result.run_id, "spike")["k8s_ai/peak_memory_bytes"])
    assert peak >= kernel["hwm"], (peak, kernel)
