"""Dispatch latency of a 2-node gang step: SlurmBackend vs a raw `sbatch`, same cluster, same run.

Both submit a job whose two ranks (one `srun` task per node) each touch a marker file; the
clock runs from submission until both markers exist. Ours goes through `SlurmBackend.submit`
(limits check, job directory, generated script) and polls `status()` until Running; the
baseline pipes a minimal equivalent script into `sbatch --parsable`. Rounds alternate between
the two, after one unmeasured warm-up job. Prints medians and the ratio ours / baseline
(target ≤ 1.3).

Run: `python -m benchmarks.bench_slurm_dispatch [--rounds N]` (root, Slurm packages installed).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from k8s_ai_orchestrator.backends.base import LaunchRequest, StepState
from k8s_ai_orchestrator.backends.slurm import SlurmBackend, SlurmConfig
from k8s_ai_orchestrator.spec import ComputeSpec, MiB
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster

RANKS = (
    'srun --nodes=2 --ntasks-per-node=1 bash -c "touch {markers}/rank-\\$SLURM_PROCID; sleep 60"'
)


def _wait_for_markers(markers: Path, poll: Callable[[], None] | None = None) -> None:
    deadline = time.monotonic() + 60
    while not all((markers / f"rank-{rank}").exists() for rank in (0, 1)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"ranks did not start within 60s (markers in {markers})")
        if poll is not None:
            poll()
        time.sleep(0.02)


def _ours(backend: SlurmBackend, markers: Path) -> tuple[float, str]:
    spec = ComputeSpec(cpu=1, memory_bytes=256 * MiB, nodes=2)
    request = LaunchRequest(
        run_id=uuid.uuid4().hex,
        step_key="bench",
        attempt=0,
        command=["bash", "-c", RANKS.format(markers=markers)],
        env={"K8S_AI_BACKEND": "slurm"},
        spec=spec,
    )
    start = time.perf_counter()
    handle = backend.submit(request)
    running = False

    def poll() -> None:
        nonlocal running
        running = running or backend.status(handle).state is StepState.RUNNING

    _wait_for_markers(markers, poll)
    elapsed = time.perf_counter() - start
    backend.cancel(handle)
    return elapsed, handle.job_id


def _raw(cluster: LocalSlurmCluster, markers: Path) -> tuple[float, str]:
    script = "\n".join(
        [
            "#!/bin/bash",
            "#SBATCH --nodes=2",
            "#SBATCH --ntasks-per-node=1",
            "#SBATCH --cpus-per-task=1",
            "#SBATCH --mem=256M",
            f"#SBATCH --output={markers}/out.log",
            RANKS.format(markers=markers),
            "",
        ]
    )
    start = time.perf_counter()
    done = subprocess.run(
        ["sbatch", "--parsable"],
        input=script,
        capture_output=True,
        text=True,
        env=cluster.env,
        timeout=30,
        check=True,
    )
    _wait_for_markers(markers)
    elapsed = time.perf_counter() - start
    job_id = done.stdout.strip().split(";")[0]
    cluster.run(["scancel", job_id])
    return elapsed, job_id


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    rounds = parser.parse_args().rounds
    with LocalSlurmCluster(rest=False) as cluster:
        config = SlurmConfig(workdir=str(cluster.workdir), slurm_conf=str(cluster.conf_path))
        backend = SlurmBackend(config)
        backend.limits()  # queried once per backend, as in a run
        warm_up = cluster.workdir / "bench-warm-up"
        warm_up.mkdir()
        _raw(cluster, warm_up)  # the cluster's first job pays one-off start-up costs
        cluster.wait_until_idle(60)
        times: dict[str, list[float]] = {"ours": [], "raw": []}
        for index in range(rounds):
            for name in ("raw", "ours") if index % 2 else ("ours", "raw"):
                markers = cluster.workdir / f"bench-{name}-{index}"
                markers.mkdir()
                if name == "ours":
                    elapsed, _ = _ours(backend, markers)
                else:
                    elapsed, _ = _raw(cluster, markers)
                times[name].append(elapsed)
                cluster.wait_until_idle(60)
    ours, raw = statistics.median(times["ours"]), statistics.median(times["raw"])
    print(f"2-node gang dispatch → all ranks running, median of {rounds} rounds")
    print(f"  raw sbatch:    {raw:.3f}s  {[round(t, 3) for t in times['raw']]}")
    print(f"  SlurmBackend:  {ours:.3f}s  {[round(t, 3) for t in times['ours']]}")
    print(f"  ratio ours / raw sbatch: {ours / raw:.2f} (target ≤ 1.3)")


if __name__ == "__main__":
    main()
