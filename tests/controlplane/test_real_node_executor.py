"""`ai_executor` on a real node: each step is a Job on the session plane's host, its pod a
container run by a real kubelet, containerd and runc on this machine's kernel.

The run worker is this test process (or a `dagster api execute_run` process), as in the other
end-to-end tests; the steps are real `dagster api execute_step` processes inside containers,
set up by `realnode_steps.kubernetes_section` (the base image, the host's Python, this checkout
and the test's directory mounted; placement by `step_k8s_config`).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterEventType, DagsterInstance, execute_job, materialize, reconstructable
from kubernetes import client, config

from k8s_ai_orchestrator import AICompute
from k8s_ai_orchestrator.quantities import parse_memory
from k8s_ai_orchestrator.testing.controlplane import ControlPlane
from k8s_ai_orchestrator.testing.controlplane.realnode import RealNode
from k8s_ai_orchestrator.testing.controlplane.realnode_steps import TENANT, kubernetes_section
from k8s_ai_orchestrator.testing.kube.emulator import wait_until
from k8s_ai_orchestrator.testing.priorityclasses import install_priority_classes
from tests.controlplane.realnode_pipelines import (
    burns_job,
    growing_job,
    grown,
    hello_job,
    outgrows_job,
    scratch_job,
)
from tests.pipes.pipes_support import (
    attempt_rows,
    check_evaluation,
    materialization_metadata,
    materialize_tiles,
)
from tests.support import engine_messages

pytestmark = [pytest.mark.controlplane, pytest.mark.realnode, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
GiB = 1024**3


# The chart's PriorityClasses (helm/k8s-ai-tenant); the host carries only translated copies.
@pytest.fixture
def priority_classes(control_plane: ControlPlane) -> Iterator[None]:
    """The step Jobs' PriorityClasses on the host, removed after the test if it made them."""
    made = install_priority_classes(_host(control_plane))
    yield
    api = client.SchedulingV1Api(_host(control_plane))
    for name in made:
        api.delete_priority_class(name)


def _host(plane: ControlPlane) -> client.ApiClient:
    assert plane.host is not None
    return config.new_client_from_config(config_file=str(plane.host.kubeconfig))


@dataclass(frozen=True)
class OnNode:
    """What a test on the real node works with: the plane, the node, a fresh host namespace
    (its CoreV1Api), the chart's PriorityClasses there, and the test's directory (mounted)."""

    plane: ControlPlane
    node: RealNode
    core: client.CoreV1Api
    ns: str
    folder: Path

    def config(self) -> dict[str, Any]:
        """The executor's config: the host as the one tenant, every step on the real node."""
        assert self.plane.host is not None
        kubernetes = kubernetes_section(self.plane.host.kubeconfig, self.ns, [ROOT], [self.folder])
        return {
            "backend": "kubernetes",
            "default_tenant": TENANT,
            "allowed_tenants": [TENANT],
            "kubernetes": kubernetes,
        }

    def run(
        self, job: Any, resources: dict[str, Any] | None = None, **more: Any
    ) -> tuple[Any, list[str]]:
        """Run `job` (one step) here: its step's output and the run's engine messages; the
        run must succeed. `more`: executor config keys."""
        run_config = {"execution": {"config": self.config() | more}, "resources": resources or {}}
        with (
            DagsterInstance.get() as instance,
            execute_job(reconstructable(job), instance=instance, run_config=run_config) as result,
        ):
            messages = engine_messages(instance, result.run_id)
            assert result.success, messages
            (step,) = job.nodes
            return result.output_for_node(step.name), messages

    def tally(self) -> dict[str, Any]:
        """The run config of `resume_pipelines.tally_job` here."""
        return {
            "execution": {"config": self.config()},
            "ops": {"tally": {"config": {"dir": str(self.folder)}}},
        }

    def ai(self, **more: Any) -> AICompute:
        """`AICompute` with the same `kubernetes` section (`more`: its other fields)."""
        config = self.config()
        return AICompute(
            backend="kubernetes",
            kubernetes=config["kubernetes"],
            default_tenant=TENANT,
            allowed_tenants=[TENANT],
            poll_interval_s=0.1,
            **more,
        )

    def jobs(self) -> list[Any]:
        return client.BatchV1Api(_host(self.plane)).list_namespaced_job(self.ns).items

    def pods(self) -> list[Any]:
        return self.core.list_namespaced_pod(self.ns).items


@pytest.fixture
def on_node(
    control_plane: ControlPlane,
    real_node: RealNode,
    namespace: tuple[client.CoreV1Api, str],
    priority_classes: None,
    dagster_home: Path,
    tmp_path: Path,
) -> OnNode:
    core, ns = namespace
    return OnNode(control_plane, real_node, core, ns, tmp_path)


def test_a_step_runs_on_the_real_node_and_its_output_streams_into_the_run(on_node: OnNode) -> None:
    core, ns = on_node.core, on_node.ns

    _, messages = on_node.run(hello_job)

    assert any(f"Step 'hello' is running on {on_node.node.name}" in m for m in messages), messages
    logs = [m for m in messages if m.startswith("[kubernetes log] hello:")]
    assert any("hello from a step on a real kubelet" in m for m in logs), messages
    (pod,) = on_node.pods()
    assert pod.spec.node_name == on_node.node.name
    # The run ends at the step's success event; its process exits just after.
    phase = lambda: core.read_namespaced_pod(pod.metadata.name, ns).status.phase  # noqa: E731
    assert wait_until(lambda: phase() in ("Succeeded", "Failed") and phase(), 60, 0.5) == (
        "Succeeded"
    )


def test_a_step_the_kernel_oom_kills_is_relaunched_with_more_memory(on_node: OnNode) -> None:
    _, messages = on_node.run(outgrows_job)

    relaunches = [m for m in messages if m.startswith("Relaunching:")]
    assert len(relaunches) == 1 and "OOMKilled" in relaunches[0], messages
    limits = sorted(
        j.spec.template.spec.containers[0].resources.limits["memory"] for j in on_node.jobs()
    )
    assert limits == ["1Gi", "512Mi"]
    by_attempt = {p.metadata.labels["k8s-ai/attempt"]: p for p in on_node.pods()}
    first = by_attempt["0"].status.container_statuses[0].state.terminated
    assert (first.reason, first.exit_code) == ("OOMKilled", 137)


def test_a_step_growing_past_its_limit_is_resized_in_place_by_the_real_kubelet(
    on_node: OnNode,
) -> None:
    """The step's own memory reports (its log) pass 60 % of 1Gi: its pod is resized through
    `pods/resize` (to what its climb needs, between 1.25× and 2× the limit: less on a slow
    machine, where it climbs slower; again past 60 % of that); the kubelet raises the
    container's cgroup limit, and the step reaches 1.4 GiB in the same container."""

    _, messages = on_node.run(growing_job, oom_escalation={"grow_at": 0.6})

    grew = [m for m in messages if m.startswith("Grew step 'grower' in place")]
    sizes = [re.search(r"memory (\S+) → (\S+) ", m) for m in grew]
    steps = [(parse_memory(s[1]), parse_memory(s[2])) for s in sizes if s]
    assert steps and len(steps) == len(grew), messages
    assert steps[0][0] == GiB and 1.25 * GiB <= steps[0][1] <= 2 * GiB, messages
    grown_from = [old for old, _ in steps[1:]]
    assert grown_from == [new for _, new in steps[:-1]], messages  # each from the last
    assert not any(m.startswith("Relaunching") for m in messages), messages
    (pod,) = on_node.pods()  # the same pod ran it to the end
    asked = pod.spec.containers[0].resources.limits["memory"]
    assert parse_memory(asked) == steps[-1][1] > 1.4 * GiB
    (container,) = pod.status.container_statuses
    assert container.restart_count == 0
    assert container.resources.limits["memory"] == asked  # what the kubelet applied


def test_a_step_the_kubelet_evicts_is_relaunched_and_resumes_from_its_checkpoint(
    on_node: OnNode,
) -> None:
    """A real eviction: the kubelet's eviction manager finds the step's emptyDir over its
    sizeLimit and evicts the pod (no grace period: the step saved its checkpoint as it went).
    The executor relaunches it at the same size; the second attempt resumes at unit 10."""
    checkpoints = {"checkpoints": {"config": {"root": (on_node.folder / "ckpt").as_uri()}}}
    (on_node.folder / "ckpt").mkdir()

    resumed_from, messages = on_node.run(scratch_job, checkpoints)

    assert any("'fills_scratch' was Evicted; relaunching at the same size" in m for m in messages)
    by_attempt = {p.metadata.labels["k8s-ai/attempt"]: p for p in on_node.pods()}
    evicted = by_attempt["0"].status
    assert (evicted.phase, evicted.reason) == ("Failed", "Evicted"), evicted
    assert "emptyDir" in evicted.message or "EmptyDir" in evicted.message, evicted.message
    assert resumed_from == 10  # the second attempt started where the first one saved


def test_a_run_worker_killed_mid_step_is_resumed_and_the_real_node_runs_the_step_once(
    on_node: OnNode, run_worker: Any
) -> None:
    """The run worker is SIGKILLed while the step's container runs; the resumed one (what run
    monitoring starts) reattaches to the step's Job and the container finishes it."""
    worker = run_worker("tally_job", on_node.tally())
    worker.started(on_node.folder)
    worker.kill()

    worker.resume()
    reattached = worker.reattached()
    worker.release(on_node.folder)

    assert reattached.startswith("Reattached to step 'tally' (attempt 1, kubernetes job")
    assert (on_node.folder / "executions").read_text().splitlines() == ["tally attempt 0"]
    assert len(on_node.jobs()) == 1


def test_terminating_a_run_leaves_no_container_on_the_real_node(
    on_node: OnNode, run_worker: Any
) -> None:
    """Dagster's termination (SIGINT to the run worker) deletes the step's Job: the kubelet
    stops its container and sandbox, and no process of the pod or its shim is left while the
    node goes on running."""
    worker = run_worker("tally_job", on_node.tally())
    worker.started(on_node.folder)
    assert on_node.node.leftovers() != []  # the step's container, its pause and their shim

    worker.terminate()

    assert any(m.startswith("Cancelled step 'tally' (kubernetes job") for m in worker.messages())
    wait_until(lambda: not on_node.jobs(), 60, 0.5)
    wait_until(lambda: not on_node.pods(), 60, 0.5)
    wait_until(
        lambda: on_node.node.leftovers() == [], 60, 0.5, lambda: str(on_node.node.leftovers())
    )
    assert not (on_node.folder / "release").exists()


def test_a_pipes_program_runs_on_the_real_node_and_reports_through_its_pod_log(
    on_node: OnNode,
) -> None:
    """`AICompute` with the same `kubernetes` section: the program's materialization and
    check come back from its container's log, read through the real kubelet."""
    ai = on_node.ai()
    size = {"cpu": 0.5, "memory": "512Mi"}

    result = materialize_tiles(ai, size, {"TILES": "2"}, (on_node.folder / "ckpt").as_uri())

    assert result.success
    metadata = materialization_metadata(result)
    assert (metadata["tiles"], metadata["backend"], metadata["tenant"]) == (2, "kubernetes", "host")
    assert check_evaluation(result) == ("tiles_complete", True)
    (row,) = attempt_rows(metadata)
    assert row["outcome"] == "Succeeded"
    (pod,) = on_node.pods()
    assert pod.spec.node_name == on_node.node.name


def test_a_pipes_program_read_from_the_kubelet_s_summary_is_grown_in_place(on_node: OnNode) -> None:
    """A program that does not report its memory is measured from the real kubelet's
    `/stats/summary` (through `nodes/proxy`, which the admin kubeconfig may read): past 60 %
    of its 1Gi it is resized to 2Gi in place, and sees its cgroup's limit raised."""
    ai = on_node.ai(oom_escalation={"grow_at": 0.6})

    result = materialize([grown], resources={"ai": ai}, raise_on_error=False)

    assert result.success
    (event,) = result.get_asset_materialization_events()
    seen = {k: v.value for k, v in event.materialization.metadata.items()}
    assert (seen["limit_before"], seen["limit"]) == (GiB, 2 * GiB), seen
    (pod,) = on_node.pods()
    assert pod.status.container_statuses[0].restart_count == 0


def test_a_measured_steps_cpu_time_and_peak_memory_agree_with_the_kubelets(
    on_node: OnNode,
) -> None:
    """Issue 29's bounds on the real node: a measured step (in-place growth on) that holds
    300 MiB while it burns 3 CPU-seconds reports its CPU time and working set from its cgroup;
    its summary's `cpu_used_seconds` is within max(2 %, 1 s) of the kubelet's last
    `usageCoreNanoSeconds` for the container, its `peak_memory_bytes` within 5 % of the most
    `workingSetBytes` the kubelet showed (read through `nodes/proxy` while it ran)."""
    core, node = client.CoreV1Api(_host(on_node.plane)), on_node.node.name
    seen: dict[str, float] = {"cpu": 0.0, "memory": 0.0}
    stop = threading.Event()

    def watch_the_kubelet() -> None:
        while not stop.is_set():
            answer = core.connect_get_node_proxy_with_path(
                node, "stats/summary", _preload_content=False
            )
            for pod in json.loads(answer.data).get("pods") or []:
                if pod["podRef"]["namespace"] != on_node.ns:
                    continue
                for container in pod.get("containers") or []:
                    cpu = (container.get("cpu") or {}).get("usageCoreNanoSeconds")
                    memory = (container.get("memory") or {}).get("workingSetBytes")
                    if cpu:
                        seen["cpu"] = max(seen["cpu"], cpu / 1e9)
                    if memory:
                        seen["memory"] = max(seen["memory"], float(memory))
            stop.wait(1.0)

    watcher = threading.Thread(target=watch_the_kubelet, daemon=True)
    watcher.start()
    run_config = {"execution": {"config": on_node.config() | {"oom_escalation": {"grow_at": 0.9}}}}
    try:
        with (
            DagsterInstance.get() as instance,
            execute_job(
                reconstructable(burns_job), instance=instance, run_config=run_config
            ) as result,
        ):
            assert result.success, engine_messages(instance, result.run_id)
            records = instance.all_logs(result.run_id, of_type=DagsterEventType.ENGINE_EVENT)
            (summary,) = [
                r.dagster_event
                for r in records
                if r.dagster_event
                and (r.dagster_event.message or "").startswith("Step 'burns' reserved")
            ]
    finally:
        stop.set()
        watcher.join(timeout=10)
    meta = {k: v.value for k, v in summary.event_specific_data.metadata.items()}  # type: ignore[union-attr]
    cpu, peak = float(meta["k8s_ai/cpu_used_seconds"]), float(meta["k8s_ai/peak_memory_bytes"])
    assert meta["k8s_ai/nodes_used"] == on_node.node.name  # its pod's, read as it ended
    assert seen["cpu"] >= 3.0 and seen["memory"] >= 300 << 20, seen
    assert abs(cpu - seen["cpu"]) <= max(0.02 * seen["cpu"], 1.0), (cpu, seen)
    assert abs(peak - seen["memory"]) <= 0.05 * seen["memory"], (peak, seen)
