"""Dispatch latency of a 2-node gang step: SlurmBackend vs a raw `sbatch`, same cluster, same run.

Both submit a job whose two ranks (one `srun` task per node) each touch a marker file; the
clock runs from submission until both markers exist. Ours goes through `SlurmBackend.submit`
(limits check, job directory, generated script) and polls `status()` until Running; the
baseline pipes a minimal equivalent script into `sbatch --parsable`. Rounds alternate between
the two, after one unmeasured warm-up job. Prints medians and the ratio ours / baseline
(target ≤ 1.3).

Run: `python -m benchmarks.bench_slurm_dispatch [--rounds N] [--prefix DIR]` (root, Slurm
packages installed): both transports, CLI and REST, against the same baseline; `--prefix` runs
the cluster from a Slurm built from source (`scripts/build-slurm.sh` prints its prefix; 24.11)
instead of Debian's 22.05.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from k8s_ai_orchestrator.backends.base import LaunchRequest, StepState
from k8s_ai_orchestrator.backends.slurm import SlurmBackend
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


def _backends(cluster: LocalSlurmCluster) -> dict[str, SlurmBackend]:
    backends = {t: SlurmBackend(cluster.backend_config(t)) for t in ("cli", "rest")}
    for backend in backends.values():
        backend.limits()  # queried once per backend, as in a run
    return backends


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prefix", type=Path, default=None, help="a Slurm built from source")
    args = parser.parse_args()
    rounds = args.rounds
    with LocalSlurmCluster(prefix=args.prefix) as cluster:
        os.environ["PATH"] = cluster.env["PATH"]  # sbatch, and the job's srun, of this version
        version = cluster.run(["sbatch", "--version"]).stdout.strip()
        backends = _backends(cluster)
        warm_up = cluster.workdir / "bench-warm-up"
        warm_up.mkdir()
        _raw(cluster, warm_up)  # the cluster's first job pays one-off start-up costs
        cluster.wait_until_idle(60)
        times: dict[str, list[float]] = {"raw": [], "cli": [], "rest": []}
        for index in range(rounds):
            order = ("raw", "cli", "rest") if index % 2 else ("rest", "cli", "raw")
            for name in order:
                markers = cluster.workdir / f"bench-{name}-{index}"
                markers.mkdir()
                if name == "raw":
                    elapsed, _ = _raw(cluster, markers)
                else:
                    elapsed, _ = _ours(backends[name], markers)
                times[name].append(elapsed)
                cluster.wait_until_idle(60)
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"{version}: 2-node gang dispatch → all ranks running, median of {rounds} rounds")
    for name, label in (
        ("raw", "raw sbatch"),
        ("cli", "SlurmBackend cli"),
        ("rest", "SlurmBackend rest"),
    ):
        print(f"  {label + ':':19} {medians[name]:.3f}s  {[round(t, 3) for t in times[name]]}")
    for name in ("cli", "rest"):
        print(f"  ratio {name} / raw sbatch: {medians[name] / medians['raw']:.2f} (target ≤ 1.3)")


if __name__ == "__main__":
    main()
