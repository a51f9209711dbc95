"""Right-sizing on Kubernetes, end to end: `ai_executor` reads a running step's memory from
the step's own reports in its pod log (`steppod`) and resizes its pod through `pods/resize`
before the OOM; without room on the node the resize waits and the step falls back to OOM
escalation; `memory="auto"` is sized from the peak the last run measured. On the real v1.37
control plane the resize goes tenant → syncer → host → node agent; the in-place growth on the
emulator too (its Deferred resize is held to the real plane by the contract checks,
`memory="auto"` on the local backend by tests/local)"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterEventType, DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository
from k8s_support import NAMESPACE
from kubernetes import client
from test_k8s_executor_e2e import engine_messages, executor_config

from k8s_ai_orchestrator.quantities import parse_memory
from tests.plane_fixtures import TENANT_TARGETS

# emulator or controlplane: each target parameter carries its marker (tests/plane_fixtures.py)
pytestmark = pytest.mark.timeout(420)

HERE = Path(__file__).parent
REPO = ReconstructableRepository.for_module("k8s_pipelines", "defs", working_directory=str(HERE))
GROW = {"oom_escalation": {"grow_at": 0.6}}
MiB, GiB = 1024**2, 1024**3


def run_growing(instance: DagsterInstance, cluster: Any) -> Any:
    config = executor_config(cluster) | GROW
    return execute_job(
        REPO.get_reconstructable_job("growing_job"),
        instance=instance,
        run_config={"execution": {"config": config}},
        raise_on_error=False,
    )


def step_pods(cluster: Any) -> list[dict[str, Any]]:
    return [
        p
        for p in cluster.pods("team-a", NAMESPACE)
        if (p["metadata"].get("annotations") or {}).get("k8s-ai/step-key") == "grower"
        or (p["metadata"].get("labels") or {}).get("k8s-ai/attempt") is not None
    ]


@pytest.mark.parametrize("cluster", TENANT_TARGETS, indirect=True)
@pytest.mark.slow
def test_a_step_growing_past_its_limit_is_resized_in_place_and_keeps_its_pod(
    cluster: Any,
) -> None:
    with DagsterInstance.get() as instance:
        result = run_growing(instance, cluster)
        messages = engine_messages(instance, result.run_id)
    assert result.success, messages
    grew = [m for m in messages if m.startswith("Grew step 'grower' in place")]
    # each growth by what its climb of ~130 MiB/s needs for 10 s more, at most × 2 (the
    # factor): 1Gi → 2Gi → ~4Gi → ~6Gi for its ~3 GiB, where × 2 each time ends at 8Gi
    sizes = [
        (parse_memory(old), parse_memory(new))
        for old, new in (re.search(r"memory (\S+) → (\S+) ", m).groups() for m in grew)  # type: ignore[union-attr]
    ]
    assert sizes[0] == (GiB, 2 * GiB), messages
    assert all(old < new <= 2 * old for old, new in sizes), messages
    assert all(a[1] == b[0] for a, b in zip(sizes, sizes[1:], strict=False)), messages
    assert 3 * GiB < sizes[-1][1] < 8 * GiB, messages
    assert not any(m.startswith("Relaunching") for m in messages)
    assert len(cluster.jobs("team-a", NAMESPACE)) == 1  # one attempt
    pods = step_pods(cluster)
    assert len(pods) == 1  # the same pod (UID) ran it to the end
    assert pods[0]["status"]["containerStatuses"][0]["restartCount"] == 0
    resized = pods[0]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert parse_memory(resized) == sizes[-1][1]  # the pod's own spec, resized in place


@pytest.mark.controlplane
@pytest.mark.parametrize("cluster", ["control-plane"], indirect=True)  # the emulator: contract
def test_without_room_on_the_node_the_resize_waits_and_the_step_is_relaunched(
    cluster: Any,
) -> None:
    """A pod on the host fills the step's node but 512Mi: growing 1Gi → 2Gi is Deferred, the
    step is OOMKilled at 1Gi and relaunched with 2Gi once the filler is gone."""
    host = client.CoreV1Api(cluster.host.api_client())
    node = host.read_node("big-1")
    room = parse_memory(node.status.allocatable["memory"]) - 1536 * MiB
    filler = client.V1Pod(
        metadata=client.V1ObjectMeta(name="filler"),
        spec=client.V1PodSpec(
            node_name="big-1",
            restart_policy="Never",
            containers=[
                client.V1Container(
                    name="main",
                    image="python:3.12-slim",
                    command=["python", "-c", "import time; time.sleep(600)"],
                    resources=client.V1ResourceRequirements(
                        requests={"memory": f"{room // MiB}Mi"}
                    ),
                )
            ],
        ),
    )
    host.create_namespaced_pod("default", filler)
    stop = threading.Event()

    def free_the_node_after_the_oom() -> None:
        while not stop.is_set():
            failed = [p for p in step_pods(cluster) if p.get("status", {}).get("phase") == "Failed"]
            if failed:
                try:
                    host.delete_namespaced_pod("filler", "default", grace_period_seconds=0)
                except client.ApiException as error:  # the test's clean-up may delete it first
                    if error.status != 404:
                        raise
                return
            stop.wait(0.2)

    watcher = threading.Thread(target=free_the_node_after_the_oom, daemon=True)
    watcher.start()
    try:
        with DagsterInstance.get() as instance:
            result = run_growing(instance, cluster)
            messages = engine_messages(instance, result.run_id)
    finally:
        stop.set()
        watcher.join(timeout=5)
        try:
            host.delete_namespaced_pod("filler", "default", grace_period_seconds=0)
        except client.ApiException:
            pass
    assert result.success, messages
    pending = [m for m in messages if m.startswith("Growing step 'grower' in place")]
    assert pending and "from 1Gi to 2Gi is pending" in pending[0], messages
    assert "Node didn't have enough resource: memory" in pending[0]
    assert any(m.startswith("Relaunching") and "1Gi → 2Gi" in m for m in messages), messages
    assert len(cluster.jobs("team-a", NAMESPACE)) == 2


def step_summary(instance: DagsterInstance, run_id: str) -> dict[str, Any]:
    records = instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
    metas = [
        {k: v.value for k, v in r.dagster_event.engine_event_data.metadata.items()}
        for r in records
        if r.dagster_event
    ]
    return [m for m in metas if "k8s_ai/peak_memory_bytes" in m][-1]


@pytest.mark.controlplane
@pytest.mark.parametrize("cluster", ["control-plane"], indirect=True)  # local: tests/local
def test_memory_auto_converges_within_1_3x_of_the_true_peak_after_one_run(cluster: Any) -> None:
    config = {"execution": {"config": executor_config(cluster)}}
    job = REPO.get_reconstructable_job("auto_job")
    with DagsterInstance.get() as instance:
        first = execute_job(job, instance=instance, run_config=config)
        assert first.success
        assert step_summary(instance, first.run_id)["k8s_ai/peak_memory_bytes"] > 400 * MiB
        second = execute_job(job, instance=instance, run_config=config)
        assert second.success
        messages = engine_messages(instance, second.run_id)
        peak = step_summary(instance, second.run_id)["k8s_ai/peak_memory_bytes"]
    launch = next(m for m in messages if m.startswith("Launching step 'auto_sized'"))
    assert "memory auto: 1.2 × peak" in launch and f"of run {first.run_id[:8]}" in launch
    sized = parse_memory(launch.split(" with 0.5 CPU / ")[1].split(" ")[0])
    assert peak <= sized <= 1.3 * peak, (launch, peak)
