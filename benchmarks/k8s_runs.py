"""Targets and run workers shared by `bench_k8s_executors` and `bench_scale`.

A target is the real control plane (node agent, one vCluster-style tenant through the syncer)
or the emulator, with the same nodes and tenant; `run_worker` runs one Dagster run of the
fan-out job in `benchmarks.k8s_run_worker` as a child process, under `ai_executor` or
dagster-k8s's `k8s_job_executor`, and returns what it measured (`RunFigures`): requests by
kind, run-worker CPU and peak RSS (from `wait4`), wall time and launch -> running per step.
`byte_compiled` compiles this checkout's modules first, as an installed wheel has them.
"""

from __future__ import annotations

import compileall
import json
import os
import signal
import statistics
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import config

from k8s_ai_orchestrator.testing.controlplane import build_kubeplane, start_control_plane
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec
from k8s_ai_orchestrator.testing.priorityclasses import install_priority_classes

TENANT = "team-a"
NAMESPACE = "default"
ROOT = Path(__file__).resolve().parents[1]
NODES = [NodeSpec(name=f"node-{i}", cpu="64", memory="256Gi") for i in range(2)]


def byte_compiled() -> None:
    """Compile this package's and the benchmarks' modules to bytecode before a measurement.

    `pip install` compiles a wheel's modules (dagster-k8s's among them); this editable checkout
    is compiled only when Python may write `__pycache__`. Under `PYTHONDONTWRITEBYTECODE` every
    run worker and step process would compile ours from source again (about 60 ms each, on
    the critical path of a takeover), a cost no installed deployment pays. Up-to-date modules
    are skipped; a module edited later is compiled in memory as before.
    """
    for package in ("k8s_ai_orchestrator", "benchmarks"):
        compileall.compile_dir(ROOT / package, quiet=1)


@dataclass(frozen=True)
class RunFigures:
    """What one run worker measured."""

    steps: int  # ops, the gather included
    requests: dict[str, int]
    cpu_s: float
    wall_s: float
    launch_s: list[float]  # Job created -> op running, per fanned-out op
    running_minutes: float
    detail: dict[str, int]  # "GET pods" -> count
    peak_rss_mb: float = 0.0  # the run worker's maximum resident set (ru_maxrss)
    run_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # what the run worker added to OUT

    def per_step(self, kind: str) -> float:
        return self.requests.get(kind, 0) / self.steps

    @property
    def reads_per_step_minute(self) -> float:
        return self.requests.get("status reads", 0) / max(self.running_minutes, 1e-9)


@contextmanager
def control_plane_tenant(work: Path, nodes: Sequence[NodeSpec] = NODES) -> Iterator[str]:
    """The real control plane with `nodes` and one tenant; yields its kubeconfig.

    Raises `KubeplaneUnavailable` when the Go binaries are not built.
    """
    bin_dir = build_kubeplane(ROOT / "scripts" / "build-kubeplane.sh", check_only=True)
    with start_control_plane(bin_dir, work / "plane", tenants=[TENANT]) as plane:
        with RealKube(plane, nodes, work / "nodes") as kube:
            kube.wait_for(lambda: kube.pods(TENANT) == [] and _tenant_nodes(kube, nodes), 60)
            install_priority_classes(kube.tenant(TENANT).api_client())
            yield kube.tenant(TENANT).kubeconfig_path


def _tenant_nodes(kube: RealKube, nodes: Sequence[NodeSpec]) -> bool:
    from kubernetes.client import CoreV1Api

    return len(CoreV1Api(kube.tenant(TENANT).api_client()).list_node().items) == len(nodes)


@contextmanager
def real_node_host(work: Path, writable: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """The real control plane's host with one real node (kubelet, containerd, runc; built by
    `scripts/build-node.sh`); yields the `kubernetes` section that runs steps there
    (`realnode_steps`: this checkout read-only, `writable` mounted read-write).

    Raises `KubeplaneUnavailable` when the Go binaries are not built.
    """
    from k8s_ai_orchestrator.testing.controlplane.binary import build_node
    from k8s_ai_orchestrator.testing.controlplane.realnode import RealNode
    from k8s_ai_orchestrator.testing.controlplane.realnode_steps import kubernetes_section

    bin_dir = build_kubeplane(ROOT / "scripts" / "build-kubeplane.sh", check_only=True)
    node_bin = build_node(ROOT / "scripts" / "build-node.sh", check_only=True)
    with (
        start_control_plane(bin_dir, work / "plane", tenants=[]) as plane,
        RealNode(plane, node_bin, Path(tempfile.mkdtemp(prefix="k8sai-rn-"))),
    ):
        assert plane.host is not None
        install_priority_classes(
            config.new_client_from_config(config_file=str(plane.host.kubeconfig))
        )
        yield kubernetes_section(plane.host.kubeconfig, NAMESPACE, [ROOT], writable)


@contextmanager
def emulator_tenant(work: Path, nodes: Sequence[NodeSpec] = NODES) -> Iterator[str]:
    """The emulator with `nodes` and the same tenant; yields the tenant's kubeconfig."""
    with KubeEmulator(nodes=list(nodes), tenants=[TENANT], tls=False, workdir=work) as emu:
        install_priority_classes(emu.tenant(TENANT).api_client())
        yield emu.tenant(TENANT).kubeconfig_path


def executor_config(
    executor: str, kubeconfig: str, concurrency: int, step_command: Sequence[str] = ()
) -> dict[str, Any]:
    """Run config of either executor; `step_command` replaces `dagster` in the step pods."""
    if executor == "ai":
        return {
            "backend": "kubernetes",
            "default_tenant": TENANT,
            "max_concurrent": concurrency,
            "kubernetes": {
                "image": "bench:latest",
                "command_prefix": list(step_command) or [sys.executable, "-m", "dagster"],
                "tenants": {TENANT: {"kubeconfig": kubeconfig, "namespace": NAMESPACE}},
            },
        }
    config: dict[str, Any] = {
        "job_image": "bench:latest",
        "image_pull_policy": "IfNotPresent",
        "job_namespace": NAMESPACE,
        "load_incluster_config": False,
        "kubeconfig_file": kubeconfig,
        "max_concurrent": concurrency,
    }
    if step_command:  # the container's args stay `dagster api execute_step`
        config["step_k8s_config"] = {"container_config": {"command": list(step_command)}}
    return config


def dagster_home(work: Path, kubeconfig: str, postgres_url: str = "") -> Path:
    """An instance whose run launcher is dagster-k8s's (k8s_job_executor reads its defaults),
    stored in SQLite files under it, or in PostgreSQL at `postgres_url`."""
    home = Path(tempfile.mkdtemp(prefix="home-", dir=work))
    storage = f"storage:\n  postgres:\n    postgres_url: {postgres_url}\n" if postgres_url else ""
    (home / "dagster.yaml").write_text(
        f"telemetry:\n  enabled: false\n{storage}"
        "run_launcher:\n  module: dagster_k8s\n  class: K8sRunLauncher\n  config:\n"
        "    instance_config_map: dagster-instance\n    service_account_name: default\n"
        f"    job_namespace: {NAMESPACE}\n    load_incluster_config: false\n"
        f"    kubeconfig_file: {kubeconfig}\n"
    )
    return home


@dataclass(frozen=True)
class RunOptions:
    """How `run_worker` varies a run beyond executor, steps and step duration."""

    concurrency: int | None = None  # max_concurrent; None: every step at once
    step_command: tuple[str, ...] = ()  # what the step pods run instead of `dagster`
    env: dict[str, str] = field(default_factory=dict)  # more environment for the step pods
    wrapper: tuple[str, ...] = ()  # argv before the run worker's own (a profiler)
    worker_args: tuple[str, ...] = ()  # more `k8s_run_worker` arguments
    postgres_url: str = ""  # the instance's storage; "": SQLite files


def exit_on_sigterm() -> None:
    """SIGTERM ends the benchmark as Ctrl-C does: its `with` blocks stop the run worker, the
    cluster and the PostgreSQL server they started (the default action would leave them)."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def run_worker(
    executor: str,
    kubeconfig: str,
    work: Path,
    steps: int,
    seconds: float,
    options: RunOptions = RunOptions(),
) -> RunFigures:
    """One run in a child process; its CPU time and peak RSS come from wait4."""
    byte_compiled()
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=work))
    marks = run_dir / "marks"
    marks.mkdir()
    config = run_dir / "config.json"
    concurrency = options.concurrency or steps
    config.write_text(
        json.dumps(executor_config(executor, kubeconfig, concurrency, options.step_command))
    )
    out = run_dir / "out.json"
    # Step processes (started by the node agent or the emulator, children of this process)
    # inherit this environment.
    os.environ.update(
        BENCH_STEPS=str(steps),
        BENCH_STEP_SECONDS=str(seconds),
        BENCH_MARKS=str(marks),
        DAGSTER_HOME=str(dagster_home(work, kubeconfig, options.postgres_url)),
        **options.env,
    )
    argv = [sys.executable, "-m", "benchmarks.k8s_run_worker", "--executor", executor]
    argv += ["--config", str(config), "--out", str(out), *options.worker_args]
    argv = [*options.wrapper, *argv]
    pid = os.spawnv(os.P_NOWAIT, argv[0], argv)
    try:
        _, status, usage = os.wait4(pid, 0)
    except BaseException:  # interrupted: the run worker does not outlive the benchmark
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise
    result = json.loads(out.read_text()) if out.exists() else {"success": False}
    if status != 0 or not result["success"]:
        raise RuntimeError(f"the {executor} run of {steps} x {seconds:g}s steps failed")
    launches = [
        mark["started"] - result["created"][step]
        for step, mark in result["marks"].items()
        if step in result["created"] and step != "gather"
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
        peak_rss_mb=usage.ru_maxrss / 1024,
        run_id=result.get("run_id", ""),
        extra=result.get("extra", {}),
    )


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (inclusive method); the value itself for one value."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[int(q) - 1]
