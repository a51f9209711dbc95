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


def _run(executor_name: str, concurrency: int, instance: DagsterInstance) -> float:
    if executor_name == "ai":
        config = {"local": {"cpus": concurrency, "memory": f"{concurrency * 2}Gi"}}
    else:
        config = {"max_concurrent": concurrency}
    recon = ReconstructableJob.for_module("benchmarks.fanout_jobs", f"fanout_{executor_name}")
    start = time.perf_counter()
    result = execute_job(recon, instance=instance, run_config={"execution": {"config": config}})
    elapsed = time.perf_counter() - start
    assert result.success, f"{executor_name} run failed"
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        Path(home, "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
        os.environ["DAGSTER_HOME"] = home
        os.chdir(ROOT)
        with DagsterInstance.get() as instance:
            times: dict[str, list[float]] = {"ai": [], "multiprocess": []}
            for _ in range(args.rounds):
                for name in ("multiprocess", "ai"):
                    times[name].append(_run(name, args.concurrency, instance))
    ours, base = statistics.median(times["ai"]), statistics.median(times["multiprocess"])
    print(f"16-step fan-out, concurrency {args.concurrency}, {args.rounds} rounds (median)")
    for label, name, median in (
        ("multiprocess_executor", "multiprocess", base),
        ("ai_executor (local)", "ai", ours),
    ):
        rounds = ", ".join(f"{t:.2f}" for t in times[name])
        print(f"  {label:<22} {median:6.2f} s  [{rounds}]")
    print(f"  ratio ai/multiprocess: {ours / base:.3f}  (target <= 1.05)")


if __name__ == "__main__":
    main()
