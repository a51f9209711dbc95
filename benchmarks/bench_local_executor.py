"""ai_executor on the local backend vs Dagster's multiprocess_executor, same job, same script.

A 16-step fan-out of trivial steps (+ one gather step), at the same concurrency. Prints wall
times and the ratio ours / baseline (target ≤ 1.05).

Run: `python -m benchmarks.bench_local_executor [--rounds N] [--concurrency C]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from dagster import DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableJob

ROOT = Path(__file__).parents[1]


VARIANTS = {
    "multiprocess": ("multiprocess_executor", "fanout_multiprocess", None),
    "ai-spawn": ("ai_executor, spawn", "fanout_ai", "spawn"),
    "ai-forkserver": ("ai_executor, forkserver", "fanout_ai", "forkserver"),
}


def _run(variant: str, concurrency: int, instance: DagsterInstance) -> float:
    _, job_name, start_method = VARIANTS[variant]
    if start_method is None:
        config: dict[str, object] = {"max_concurrent": concurrency}
    else:
        local = {"cpus": concurrency, "memory": f"{concurrency * 2}Gi"}
        config = {"local": {**local, "start_method": start_method}}
    recon = ReconstructableJob.for_module("benchmarks.fanout_jobs", job_name)
    start = time.perf_counter()
    result = execute_job(recon, instance=instance, run_config={"execution": {"config": config}})
    elapsed = time.perf_counter() - start
    assert result.success, f"{variant} run failed"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in VARIANTS}
    with tempfile.TemporaryDirectory() as home:
        Path(home, "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        os.environ["DAGSTER_HOME"] = home
        os.chdir(ROOT)
        with DagsterInstance.get() as instance:
            for _ in range(args.rounds):
                for name in VARIANTS:
                    times[name].append(_run(name, args.concurrency, instance))
    base = statistics.median(times["multiprocess"])
    print(f"16-step fan-out, concurrency {args.concurrency}, {args.rounds} rounds (median)")
    for name, (label, _, _) in VARIANTS.items():
        median = statistics.median(times[name])
        rounds = ", ".join(f"{t:.2f}" for t in times[name])
        ratio = "" if name == "multiprocess" else f"  ratio {median / base:.3f} (target <= 1.05)"
        print(f"  {label:<24} {median:6.2f} s  [{rounds}]{ratio}")


if __name__ == "__main__":
    main()
