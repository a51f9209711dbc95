"""Kubernetes backend benchmarks on the emulator: API requests per step, wall time, OOM latency.

Run: `python -m benchmarks.bench_kubernetes [--steps 200] [--concurrency 20]`.

1. Fan-out: N trivial steps at the same concurrency, launched and followed
   a) by `KubernetesBackend` (one watch per tenant namespace, status from memory), and
   b) the dagster-k8s way: `DagsterKubernetesClient.create_namespaced_job_with_retries`, then
      `get_job_status` for every running Job at each poll (how dagster-k8s follows Jobs).
   Both poll every `--poll` seconds and create the same Job manifests. Printed: API requests
   per step and wall time, with the ratios ours / dagster-k8s.
2. The same fan-out through Dagster: a job of `--executor-steps` trivial ops run by
   `ai_executor` (backend kubernetes) and by dagster-k8s's `k8s_job_executor`, same
   concurrency, real `dagster api execute_step` step processes. Printed the same way.
3. OOM latency: seconds from the kubelet's OOM kill (the pod's container turns OOMKilled in the
   emulator's store) to `status()` reporting OOMKilled, ours vs the dagster-k8s poll at its
   default interval (10 s).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from dagster import DagsterInstance, Definitions, In, Nothing, execute_job, job, op
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster_k8s import k8s_job_executor
from dagster_k8s.client import DagsterKubernetesClient
from kubernetes.client import BatchV1Api, CoreV1Api, SchedulingV1Api

from k8s_ai_orchestrator import ai_executor
from k8s_ai_orchestrator.backends.base import LaunchRequest, StepState
from k8s_ai_orchestrator.backends.kubernetes.backend import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.backends.kubernetes.jobs import build_job, job_name
from k8s_ai_orchestrator.spec import resolve_spec
from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

TENANT = "team-a"
NAMESPACE = "default"
EXECUTOR_STEPS = int(os.environ.get("BENCH_K8S_EXECUTOR_STEPS", "20"))


@op
def trivial_op() -> None:
    """Does nothing: what is measured is launching and following the step."""


@op(ins={"after": In(Nothing)})
def gather() -> None:
    """Waits for the fan-out."""


def _fan_out_job(name: str, executor: Any) -> Any:
    @job(name=name, executor_def=executor)
    def fan_out() -> None:
        gather(after=[trivial_op.alias(f"tile_{i}")() for i in range(EXECUTOR_STEPS)])

    return fan_out


defs = Definitions(
    jobs=[
        _fan_out_job("fan_out_ai", ai_executor),
        _fan_out_job("fan_out_dagster_k8s", k8s_job_executor),
    ]
)


@dataclass(frozen=True)
class FanOutResult:
    requests: int
    wall_s: float
    steps: int

    @property
    def per_step(self) -> float:
        return self.requests / self.steps


def backend_config(emu: KubeEmulator) -> KubernetesConfig:
    return KubernetesConfig.from_dict(
        {
            "image": "bench:latest",
            "python": sys.executable,
            "tenants": {TENANT: {"kubeconfig": emu.tenant(TENANT).kubeconfig_path}},
        }
    )


def install_priority_classes(emu: KubeEmulator) -> None:
    """The PriorityClasses helm/k8s-ai-tenant installs; pods naming them are refused otherwise."""
    api = SchedulingV1Api(emu.tenant(TENANT).api_client())
    defaults = KubernetesConfig().priority_classes
    for name, value in ((defaults.default, 100000), (defaults.preemptible, 1000)):
        api.create_priority_class({"metadata": {"name": name}, "value": value})


def trivial_step(
    run_id: str, index: int, code: str = "pass", memory: str = "64Mi"
) -> LaunchRequest:
    return LaunchRequest(
        run_id=run_id,
        step_key=f"tile_{index}",
        attempt=0,
        command=[sys.executable, "-c", code],
        env={},
        spec=resolve_spec({"cpu": 0.1, "memory": memory}),
        tenant=TENANT,
        grace_period_s=1,
    )


def run_limited(
    steps: int,
    concurrency: int,
    poll_s: float,
    launch: Callable[[int], Any],
    done: Callable[[Any], bool],
) -> None:
    """Keep `concurrency` steps in flight; poll each in-flight step every `poll_s`."""
    next_index, in_flight = 0, []
    while next_index < steps or in_flight:
        while next_index < steps and len(in_flight) < concurrency:
            in_flight.append(launch(next_index))
            next_index += 1
        in_flight = [h for h in in_flight if not done(h)]
        time.sleep(poll_s)


def sleeper(seconds: float) -> str:
    return f"import time; time.sleep({seconds})"


def fan_out_ours(
    emu: KubeEmulator, steps: int, concurrency: int, poll_s: float, step_s: float
) -> FanOutResult:
    backend = KubernetesBackend(backend_config(emu), allowed_tenants=[TENANT])
    run_id = str(uuid.uuid4())
    emu.reset_request_counts()
    start = time.perf_counter()

    def done(handle: Any) -> bool:
        status = backend.status(handle)
        if status.is_terminal and status.state != StepState.SUCCEEDED:
            raise RuntimeError(f"{handle.step_key}: {status}")
        return status.is_terminal

    def launch(index: int) -> Any:
        return backend.submit(trivial_step(run_id, index, sleeper(step_s)))

    run_limited(steps, concurrency, poll_s, launch, done)
    wall = time.perf_counter() - start
    requests = sum(emu.request_counts(server=TENANT).values())
    backend.close()
    return FanOutResult(requests, wall, steps)


def fan_out_dagster_k8s(
    emu: KubeEmulator, steps: int, concurrency: int, poll_s: float, step_s: float
) -> FanOutResult:
    api_client = emu.tenant(TENANT).api_client()
    client = DagsterKubernetesClient(
        BatchV1Api(api_client), CoreV1Api(api_client), logging.info, time.sleep, time.time
    )
    config = backend_config(emu)
    run_id = str(uuid.uuid4())
    emu.reset_request_counts()
    start = time.perf_counter()

    def launch(index: int) -> str:
        request = trivial_step(run_id, index, sleeper(step_s))
        client.create_namespaced_job_with_retries(
            build_job(request, config.tenant(TENANT), config), NAMESPACE
        )
        return job_name(request)

    def done(name: str) -> bool:
        status = client.get_job_status(name, NAMESPACE)
        if status is not None and status.failed:
            raise RuntimeError(f"{name} failed")
        return bool(status is not None and status.succeeded)

    run_limited(steps, concurrency, poll_s, launch, done)
    wall = time.perf_counter() - start
    requests = sum(emu.request_counts(server=TENANT).values())
    return FanOutResult(requests, wall, steps)


def oom_killed_at(emu: KubeEmulator, job: str, stop: threading.Event, out: list[float]) -> None:
    """Record when the emulator's store first shows the step's container OOMKilled."""
    while not stop.is_set():
        for pod in emu.pods(TENANT, NAMESPACE):
            if (pod["metadata"].get("labels") or {}).get("k8s-ai/job") != job:
                continue
            for container in (pod.get("status") or {}).get("containerStatuses") or ():
                terminated = (container.get("state") or {}).get("terminated") or {}
                if terminated.get("reason") == "OOMKilled":
                    out.append(time.perf_counter())
                    return
        time.sleep(0.005)


def oom_latency(emu: KubeEmulator, poll_s: float, follow: str) -> float:
    """Seconds from OOM kill to the failure report, following with `follow` (ours|dagster-k8s)."""
    hog = "import time; blocks = [bytearray(16 << 20) for _ in range(40)]; time.sleep(30)"
    request = replace(trivial_step(str(uuid.uuid4()), 0, hog, memory="96Mi"), step_key="hog")
    backend = KubernetesBackend(backend_config(emu), allowed_tenants=[TENANT])
    handle = backend.submit(request)
    killed: list[float] = []
    stop = threading.Event()
    spy = threading.Thread(target=oom_killed_at, args=(emu, handle.job_id, stop, killed))
    spy.start()
    batch = BatchV1Api(emu.tenant(TENANT).api_client())
    deadline = time.perf_counter() + 120
    try:
        while time.perf_counter() < deadline:
            if follow == "ours":
                if backend.status(handle).reason == "OOMKilled":
                    break
            else:
                job = batch.read_namespaced_job_status(handle.job_id, NAMESPACE)
                if job.status and job.status.failed:
                    break
            time.sleep(poll_s)
        reported = time.perf_counter()
    finally:
        stop.set()
        spy.join()
        backend.cancel(handle)
        backend.close()
    if not killed:
        raise RuntimeError("the step was never OOM killed")
    return max(0.0, reported - killed[0])


def executor_fan_out(
    emu: KubeEmulator, job_name_: str, config: dict[str, Any], steps: int
) -> FanOutResult:
    """Run one of the fan-out jobs through Dagster; count the tenant API requests."""
    repo = ReconstructableRepository.for_module(
        "benchmarks.bench_kubernetes", "defs", working_directory=os.getcwd()
    )
    emu.reset_request_counts()
    start = time.perf_counter()
    with DagsterInstance.get() as instance:
        result = execute_job(
            repo.get_reconstructable_job(job_name_),
            instance=instance,
            run_config={"execution": {"config": config}},
        )
    wall = time.perf_counter() - start
    if not result.success:
        raise RuntimeError(f"{job_name_} failed")
    return FanOutResult(sum(emu.request_counts(server=TENANT).values()), wall, steps)


def executor_configs(emu: KubeEmulator, concurrency: int) -> tuple[dict[str, Any], dict[str, Any]]:
    ours = {
        "backend": "kubernetes",
        "default_tenant": TENANT,
        "max_concurrent": concurrency,
        "kubernetes": {
            "image": "bench:latest",
            "command_prefix": [sys.executable, "-m", "dagster"],
            "tenants": {TENANT: {"kubeconfig": emu.tenant(TENANT).kubeconfig_path}},
        },
    }
    theirs = {
        "job_image": "bench:latest",
        "image_pull_policy": "IfNotPresent",
        "job_namespace": NAMESPACE,
        "load_incluster_config": False,
        "kubeconfig_file": emu.tenant(TENANT).kubeconfig_path,
        "max_concurrent": concurrency,
    }
    return ours, theirs


def prepare_step_environment(executor_steps: int) -> None:
    """Step processes inherit this process's environment through the emulated kubelet."""
    os.environ["BENCH_K8S_EXECUTOR_STEPS"] = str(executor_steps)
    venv_bin = os.path.dirname(sys.executable)
    os.environ["PATH"] = f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    os.environ["DAGSTER_HOME"] = tempfile.mkdtemp(prefix="bench-k8s-dagster-")


def use_k8s_run_launcher(emu: KubeEmulator) -> None:
    """k8s_job_executor reads its defaults from the instance's K8sRunLauncher."""
    config = os.path.join(os.environ["DAGSTER_HOME"], "dagster.yaml")
    with open(config, "w") as out:
        out.write(
            "telemetry:\n  enabled: false\n"
            "run_launcher:\n  module: dagster_k8s\n  class: K8sRunLauncher\n  config:\n"
            "    instance_config_map: dagster-instance\n"
            "    service_account_name: default\n"
            f"    job_namespace: {NAMESPACE}\n"
            "    load_incluster_config: false\n"
            f"    kubeconfig_file: {emu.tenant(TENANT).kubeconfig_path}\n"
        )


def report_fan_out(label: str, result: FanOutResult, baseline: FanOutResult) -> None:
    print(
        f"  {label}: {result.per_step:.2f} requests/step, {result.wall_s:.1f}s; ratio to "
        f"dagster-k8s: requests {result.per_step / baseline.per_step:.2f} (target <= 0.20), "
        f"wall {result.wall_s / baseline.wall_s:.2f} (target <= 0.80)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--poll", type=float, default=0.5, help="seconds between status polls")
    parser.add_argument(
        "--step-seconds", type=float, default=2.0, help="run time of one trivial step process"
    )
    parser.add_argument(
        "--executor-steps", type=int, default=20, help="ops of the Dagster fan-out job (0: skip)"
    )
    args = parser.parse_args(argv)
    prepare_step_environment(args.executor_steps)
    nodes = [
        NodeSpec(name=f"node-{i}", cpu="16", memory="64Gi", gpus=0, labels={}, taints=())
        for i in range(2)
    ]
    with KubeEmulator(nodes=nodes, tenants=[TENANT], tls=False, workdir=None) as emu:
        install_priority_classes(emu)
        n, c, poll, step_s = args.steps, args.concurrency, args.poll, args.step_seconds
        baseline = fan_out_dagster_k8s(emu, n, c, poll, step_s)
        same_poll = fan_out_ours(emu, n, c, poll, step_s)
        fast_poll = fan_out_ours(emu, n, c, 0.1, step_s)
        print(f"fan-out of {n} steps of {step_s:g}s, concurrency {c}")
        print(
            f"  dagster-k8s pattern (poll {poll:g}s): {baseline.per_step:.2f} requests/step, "
            f"{baseline.wall_s:.1f}s"
        )
        report_fan_out(f"KubernetesBackend, poll {poll:g}s", same_poll, baseline)
        report_fan_out("KubernetesBackend, poll 0.1s", fast_poll, baseline)
        if args.executor_steps:
            use_k8s_run_launcher(emu)
            ours_config, theirs_config = executor_configs(emu, c)
            ops = args.executor_steps + 1
            theirs = executor_fan_out(emu, "fan_out_dagster_k8s", theirs_config, ops)
            ours = executor_fan_out(emu, "fan_out_ai", ours_config, ops)
            print(f"Dagster job of {args.executor_steps} trivial ops + 1, concurrency {c}")
            print(f"  k8s_job_executor: {theirs.per_step:.2f} requests/step, {theirs.wall_s:.1f}s")
            report_fan_out("ai_executor", ours, theirs)
        ours_oom = oom_latency(emu, 0.05, "ours")
        baseline_oom = oom_latency(emu, 10.0, "dagster-k8s")
        print("OOM kill -> failure reported")
        print(f"  KubernetesBackend (status() every 50ms): {ours_oom:.2f}s (target <= 2s)")
        print(f"  dagster-k8s job-status poll every 10s:   {baseline_oom:.2f}s")
        print(f"  ratio ours/dagster-k8s: {ours_oom / max(baseline_oom, 1e-3):.2f}")


if __name__ == "__main__":
    main()
