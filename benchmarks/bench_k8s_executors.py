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
import json
import os
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes.client import SchedulingV1Api

from k8s_ai_orchestrator.testing.controlplane import (
    KubeplaneUnavailable,
    build_kubeplane,
    start_control_plane,
)
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

TENANT = "team-a"
NAMESPACE = "default"
ROOT = Path(__file__).resolve().parents[1]
NODES = [NodeSpec(name=f"node-{i}", cpu="64", memory="256Gi") for i in range(2)]
KINDS = ("create/delete", "log streams", "status reads", "pre-flight checks")


@dataclass(frozen=True)
class RunFigures:
    """What one run worker measured."""

    steps: int  # ops, the gather included
    requests: dict[str, int]
    cpu_s: float
    wall_s: float
    launch_s: list[float]  # Job created -> op running, per sleeping op
    running_minutes: float
    detail: dict[str, int]  # "GET pods" -> count

    def per_step(self, kind: str) -> float:
        return self.requests.get(kind, 0) / self.steps

    @property
    def reads_per_step_minute(self) -> float:
        return self.requests.get("status reads", 0) / max(self.running_minutes, 1e-9)


@contextmanager
def control_plane_tenant(work: Path) -> Iterator[str]:
    """The real control plane with two 64-CPU nodes and one tenant; yields its kubeconfig."""
    bin_dir = build_kubeplane(ROOT / "scripts" / "build-kubeplane.sh", check_only=True)
    with start_control_plane(bin_dir, work / "plane", tenants=[TENANT]) as plane:
        with RealKube(plane, NODES, work / "nodes") as kube:
            kube.wait_for(lambda: kube.pods(TENANT) == [] and _tenant_nodes(kube), 60)
            _priority_classes(kube.tenant(TENANT).api_client())
            yield kube.tenant(TENANT).kubeconfig_path


def _tenant_nodes(kube: RealKube) -> bool:
    from kubernetes.client import CoreV1Api

    return len(CoreV1Api(kube.tenant(TENANT).api_client()).list_node().items) == len(NODES)


@contextmanager
def emulator_tenant(work: Path) -> Iterator[str]:
    """The emulator with the same nodes and tenant; yields the tenant's kubeconfig."""
    with KubeEmulator(nodes=NODES, tenants=[TENANT], tls=False, workdir=work) as emu:
        _priority_classes(emu.tenant(TENANT).api_client())
        yield emu.tenant(TENANT).kubeconfig_path


def _priority_classes(api_client: Any) -> None:
    scheduling = SchedulingV1Api(api_client)
    for name, value in (("k8s-ai-standard", 100000), ("k8s-ai-preemptible", 1000)):
        scheduling.create_priority_class({"metadata": {"name": name}, "value": value})


def executor_config(executor: str, kubeconfig: str, concurrency: int) -> dict[str, Any]:
    if executor == "ai":
        return {
            "backend": "kubernetes",
            "default_tenant": TENANT,
            "max_concurrent": concurrency,
            "kubernetes": {
                "image": "bench:latest",
                "command_prefix": [sys.executable, "-m", "dagster"],
                "tenants": {TENANT: {"kubeconfig": kubeconfig, "namespace": NAMESPACE}},
            },
        }
    return {
        "job_image": "bench:latest",
        "image_pull_policy": "IfNotPresent",
        "job_namespace": NAMESPACE,
        "load_incluster_config": False,
        "kubeconfig_file": kubeconfig,
        "max_concurrent": concurrency,
    }


def dagster_home(work: Path, kubeconfig: str) -> Path:
    """An instance whose run launcher is dagster-k8s's (k8s_job_executor reads its defaults)."""
    home = Path(tempfile.mkdtemp(prefix="home-", dir=work))
    (home / "dagster.yaml").write_text(
        "telemetry:\n  enabled: false\n"
        "run_launcher:\n  module: dagster_k8s\n  class: K8sRunLauncher\n  config:\n"
        "    instance_config_map: dagster-instance\n    service_account_name: default\n"
        f"    job_namespace: {NAMESPACE}\n    load_incluster_config: false\n"
        f"    kubeconfig_file: {kubeconfig}\n"
    )
    return home


def run_worker(
    executor: str, kubeconfig: str, work: Path, steps: int, seconds: float
) -> RunFigures:
    """One run in a child process; its CPU time comes from wait4."""
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    marks = run_dir / "marks"
    marks.mkdir()
    config = run_dir / "config.json"
    config.write_text(json.dumps(executor_config(executor, kubeconfig, steps)))
    out = run_dir / "out.json"
    # Step processes (started by the node agent or the emulator, children of this process)
    # inherit this environment.
    os.environ.update(
        BENCH_STEPS=str(steps),
        BENCH_STEP_SECONDS=str(seconds),
        BENCH_MARKS=str(marks),
        DAGSTER_HOME=str(dagster_home(work, kubeconfig)),
    )
    argv = [sys.executable, "-m", "benchmarks.k8s_run_worker", "--executor", executor]
    pid = os.spawnv(
        os.P_NOWAIT, sys.executable, [*argv, "--config", str(config), "--out", str(out)]
    )
    _, status, usage = os.wait4(pid, 0)
    result = json.loads(out.read_text()) if out.exists() else {"success": False}
    if status != 0 or not result["success"]:
        raise RuntimeError(f"the {executor} run of {steps} x {seconds:g}s steps failed")
    launches = [
        mark["started"] - result["created"][step]
        for step, mark in result["marks"].items()
        if step in result["created"]
    ]
    running = sum(m["ended"] - m["started"] for m in result["marks"].values()) / 60
    return RunFigures(
        steps + 1,
        result["requests"],
        usage.ru_utime + usage.ru_stime,
        result["wall_s"],
        launches,
        running,
        result.get("detail", {}),
    )


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


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[int(q) - 1]


def report_launch(steps: int, ours: RunFigures, theirs: RunFigures) -> None:
    print(f"  launch -> running at {steps} concurrent steps (ours / dagster-k8s = ratio)")
    for q in (50, 99):
        a, b = _percentile(ours.launch_s, q), _percentile(theirs.launch_s, q)
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
