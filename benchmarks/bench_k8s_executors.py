"""`ai_executor` vs dagster-k8s's `k8s_job_executor` on the real control plane and the emulator.

Run: `python -m benchmarks.bench_k8s_executors [--durations 2,30,120] [--steps 4]
[--launch-steps 50] [--targets control-plane,emulator]`.

Each executor runs the same Dagster job (N ops sleeping D seconds, + 1 gather) in its own run
worker process (`benchmarks.k8s_run_worker`), against one vCluster-style tenant. Printed per
target, with the ratio ours / dagster-k8s:
1. API requests per step for steps of each duration, split into create/delete, log streams,
   status reads of pods, Jobs and events (a WATCH stream counts as one read) and pre-flight
   checks (any other read, and access reviews), and status reads per running step-minute
   (target: ours <= theirs at every duration; status reads per step-minute <= 0.1x); then
   every request by method and resource, for both;
2. launch -> running (Job created -> the op's code runs), p50 and p99, `--launch-steps`
   concurrent steps (target: ours <= theirs);
3. run-worker CPU-seconds per step (target <= 0.5x).
The real control plane needs `scripts/build-kubeplane.sh` (Go); without it that target is
skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from k8s_ai_orchestrator.testing.controlplane import KubeplaneUnavailable

from .k8s_runs import (
    RunFigures,
    control_plane_tenant,
    emulator_tenant,
    exit_on_sigterm,
    percentile,
    run_worker,
)

KINDS = ("create/delete", "log streams", "status reads", "pre-flight checks")


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if theirs else ("1.00" if not ours else "inf")


def report_requests(duration: float, ours: RunFigures, theirs: RunFigures) -> None:
    print(f"  steps of {duration:g}s: requests per step (ours / dagster-k8s = ratio)")
    for kind in KINDS:
        a, b = ours.per_step(kind), theirs.per_step(kind)
        print(f"    {kind:<17} {a:6.2f} / {b:6.2f} = {_ratio(a, b)}  (target <= 1)")
    a, b = ours.reads_per_step_minute, theirs.reads_per_step_minute
    print(
        f"    status reads per running step-minute {a:.2f} / {b:.2f} = {_ratio(a, b)}"
        "  (target <= 0.10)"
    )
    a, b = ours.cpu_s / ours.steps, theirs.cpu_s / theirs.steps
    print(f"    run-worker CPU s per step {a:.2f} / {b:.2f} = {_ratio(a, b)}  (target <= 0.50)")
    print(f"    every request, ours:        {_detail(ours)}")
    print(f"    every request, dagster-k8s: {_detail(theirs)}")


def _detail(figures: RunFigures) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(figures.detail.items())) or "none"


def report_launch(steps: int, ours: RunFigures, theirs: RunFigures) -> None:
    print(f"  launch -> running at {steps} concurrent steps (ours / dagster-k8s = ratio)")
    for q in (50, 99):
        a, b = percentile(ours.launch_s, q), percentile(theirs.launch_s, q)
        print(f"    p{q}  {a:6.2f}s / {b:6.2f}s = {_ratio(a, b)}  (target <= 1)")
    a, b = ours.cpu_s / ours.steps, theirs.cpu_s / theirs.steps
    print(f"    run-worker CPU s per step {a:.2f} / {b:.2f} = {_ratio(a, b)}  (target <= 0.50)")


def bench_target(name: str, kubeconfig: str, work: Path, args: argparse.Namespace) -> None:
    print(f"{name}:")
    for duration in args.durations:
        theirs = run_worker("dagster-k8s", kubeconfig, work, args.steps, duration)
        ours = run_worker("ai", kubeconfig, work, args.steps, duration)
        report_requests(duration, ours, theirs)
    if args.launch_steps:
        theirs = run_worker("dagster-k8s", kubeconfig, work, args.launch_steps, 2.0)
        ours = run_worker("ai", kubeconfig, work, args.launch_steps, 2.0)
        report_launch(args.launch_steps, ours, theirs)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--durations", type=lambda s: [float(x) for x in s.split(",")], default=[2, 30, 120]
    )
    parser.add_argument("--steps", type=int, default=4, help="steps per duration, all at once")
    parser.add_argument("--launch-steps", type=int, default=50)
    parser.add_argument("--targets", default="control-plane,emulator")
    args = parser.parse_args(argv)
    exit_on_sigterm()
    venv_bin = os.path.dirname(sys.executable)
    os.environ["PATH"] = f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    work = Path(tempfile.mkdtemp(prefix="bench-k8s-executors-"))
    for target in args.targets.split(","):
        if target == "control-plane":
            try:
                with control_plane_tenant(work / "cp") as kubeconfig:
                    bench_target(
                        "real control plane (kube-apiserver v1.37.2)", kubeconfig, work, args
                    )
            except KubeplaneUnavailable as error:
                print(f"real control plane: skipped ({error})")
        else:
            with emulator_tenant(work / "emu") as kubeconfig:
                bench_target("emulator", kubeconfig, work, args)


if __name__ == "__main__":
    main()
