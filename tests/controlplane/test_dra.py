"""GPUs through Dynamic Resource Allocation on the real control plane.

A plane of its own (no tenants: the host is the executor's one tenant, since the tenant syncer
carries no claims) whose node agent plays NVIDIA's DRA driver (`agent/dra.py`): it publishes a
ResourceSlice per node and starts a pod only with the devices the real kube-scheduler
allocated to its claim. Nothing in the product or the agent picks devices.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterEventType, DagsterInstance, execute_job, reconstructable
from kubernetes import client

from k8s_ai_orchestrator.backends.base import FailureReason, LaunchRequest, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.backends.kubernetes.dra import GpuRequest, model_selector
from k8s_ai_orchestrator.backends.kubernetes.dra_devices import NO_DEVICE_PREEMPTION
from k8s_ai_orchestrator.backends.kubernetes.jobs import build_job
from k8s_ai_orchestrator.errors import SubmitError
from k8s_ai_orchestrator.spec import resolve_spec
from k8s_ai_orchestrator.testing.controlplane import start_control_plane
from k8s_ai_orchestrator.testing.controlplane.agent.dra import DRIVER, PARTITION_CLASS, DraGpus
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.kube.emulator import wait_until
from k8s_ai_orchestrator.testing.kube.nodes import NodeSpec
from k8s_ai_orchestrator.testing.priorityclasses import install_priority_classes
from tests.controlplane.dra_pipelines import (
    H100,
    gang_gpus_job,
    gang_h100_job,
    mig_evicted_job,
    mig_hungry_job,
    mig_preemptible_job,
    one_b200_job,
    two_full_nodes_job,
    two_h100_job,
)
from tests.plane_fixtures import record_version
from tests.support import engine_messages

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
NODES = [
    NodeSpec(name=name, cpu="16", memory="64Gi", taints=(GPU_TAINT,))
    for name in ("dra-a100", "dra-h100")
]
# the A100 node comes first and has room for two: only the model keeps the step off it; the
# H100s are partitionable too (MIG-style: 7 × 1g.10gb and 2 × 3g.40gb placements per GPU)
MIG_PROFILES = (("1g.10gb", 7), ("3g.40gb", 2))
DRA_GPUS = [
    DraGpus("dra-a100", count=4, product="NVIDIA A100-SXM4-80GB", architecture="Ampere"),
    DraGpus("dra-h100", count=4, product="NVIDIA H100 80GB HBM3", partitions=MIG_PROFILES),
]
RESOURCE = ("resource.k8s.io", "v1")


@pytest.fixture(scope="module")
def dra_kube(kubeplane_bin_dir: Path) -> Iterator[RealKube]:
    run_dir = Path(tempfile.mkdtemp(prefix="k8sai-draplane-"))
    with start_control_plane(kubeplane_bin_dir, run_dir) as plane:
        record_version(plane)
        with RealKube(plane, NODES, run_dir / "nodes", dra_gpus=DRA_GPUS) as kube:
            api = kube.host.api_client()
            install_priority_classes(api)
            yield kube
    shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def namespace(dra_kube: RealKube) -> str:
    """A fresh namespace of the test's own on the DRA plane."""
    name = f"dra-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(dra_kube.host.api_client()).create_namespace({"metadata": {"name": name}})
    return name


def executor_config(kube: RealKube, namespace: str) -> dict[str, Any]:
    return {
        "backend": "kubernetes",
        "default_tenant": "gpus",
        "kubernetes": {
            "image": "ghcr.io/acme/pipeline:test",
            "python": sys.executable,
            "command_prefix": [sys.executable, "-m", "dagster"],
            "gpus": {
                "request": "dra",
                "device_class": DRIVER,
                "partition_device_class": PARTITION_CLASS,
            },
            "tenants": {
                "gpus": {"kubeconfig": str(kube.plane.host.kubeconfig), "namespace": namespace}
            },
        },
    }


def step_usage(instance: DagsterInstance, run_id: str, step: str) -> dict[str, Any]:
    """The metadata of the step's closing `Step '<step>' reserved ...` engine event."""
    records = instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
    (event,) = [
        r.dagster_event
        for r in records
        if r.dagster_event and (r.dagster_event.message or "").startswith(f"Step '{step}' reserved")
    ]
    metadata = event.event_specific_data.metadata  # type: ignore[union-attr]
    return {key: value.value for key, value in metadata.items()}


def listed(kube: RealKube, namespace: str, plural: str) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(kube.host.api_client())
    found = custom.list_namespaced_custom_object(*RESOURCE, namespace, plural)
    return list(found["items"])


def test_a_two_gpu_step_gets_two_devices_of_its_model_on_one_node_and_leaves_no_claim(
    dra_kube: RealKube, namespace: str, dagster_home: Path
) -> None:
    run_config = {"execution": {"config": executor_config(dra_kube, namespace)}}
    with (
        DagsterInstance.get() as instance,
        execute_job(
            reconstructable(two_h100_job), instance=instance, run_config=run_config
        ) as result,
    ):
        messages = engine_messages(instance, result.run_id)
        assert result.success, messages
        visible = result.output_for_node("two_h100")

    h100 = DRA_GPUS[1]
    uuids = visible["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert len(uuids) == 2 and set(uuids) <= {h100.uuid(i) for i in range(h100.count)}
    assert len(visible["CUDA_VISIBLE_DEVICES"].split(",")) == 2
    batch = client.BatchV1Api(dra_kube.host.api_client())
    core = client.CoreV1Api(dra_kube.host.api_client())
    (pod,) = core.list_namespaced_pod(namespace).items
    assert pod.spec.node_name == "dra-h100"
    assert "nvidia.com/gpu" not in (pod.spec.containers[0].resources.limits or {})
    # the claim the controller made from the template goes once its pod is done
    assert wait_until(lambda: not listed(dra_kube, namespace, "resourceclaims"), 60, 0.5), listed(
        dra_kube, namespace, "resourceclaims"
    )
    (job,) = batch.list_namespaced_job(namespace).items
    (template,) = listed(dra_kube, namespace, "resourceclaimtemplates")
    assert template["metadata"]["ownerReferences"][0]["uid"] == job.metadata.uid
    batch.delete_namespaced_job(job.metadata.name, namespace, propagation_policy="Background")
    assert wait_until(lambda: not listed(dra_kube, namespace, "resourceclaimtemplates"), 60, 0.5)


def test_a_step_asking_for_a_model_nobody_has_is_refused_before_anything_is_created(
    dra_kube: RealKube, namespace: str, dagster_home: Path
) -> None:
    run_config = {"execution": {"config": executor_config(dra_kube, namespace)}}
    with (
        DagsterInstance.get() as instance,
        execute_job(
            reconstructable(one_b200_job),
            instance=instance,
            run_config=run_config,
            raise_on_error=False,
        ) as result,
    ):
        assert not result.success
        failure = str(result.failure_data_for_node("one_b200") or result.dagster_run)
        messages = "\n".join(engine_messages(instance, result.run_id))
    said = failure + messages
    assert "no device of model nvidia-b200" in said, said
    assert "dra-h100: 4 × nvidia-h100-80gb-hbm3" in said, said
    api = dra_kube.host.api_client()
    assert not client.BatchV1Api(api).list_namespaced_job(namespace).items
    assert not client.CoreV1Api(api).list_namespaced_pod(namespace).items
    assert not listed(dra_kube, namespace, "resourceclaimtemplates")
    assert not listed(dra_kube, namespace, "resourceclaims")


def test_a_step_waiting_for_devices_is_pending_in_the_schedulers_words(
    dra_kube: RealKube, namespace: str, dagster_home: Path
) -> None:
    """Two steps that each claim the H100 node's four devices: one waits for the other."""
    run_config = {"execution": {"config": executor_config(dra_kube, namespace)}}
    job = reconstructable(two_full_nodes_job)
    with (
        DagsterInstance.get() as instance,
        execute_job(job, instance=instance, run_config=run_config) as result,
    ):
        messages = engine_messages(instance, result.run_id)
        assert result.success, messages
        held = [result.output_for_node(name) for name in ("four_h100_a", "four_h100_b")]
    pending = [m for m in messages if " is Pending: " in m]
    assert any("cannot allocate all claims" in m for m in pending), messages
    assert any(NO_DEVICE_PREEMPTION in m for m in pending), messages
    free = "free now: dra-h100 0 of 4 devices of model nvidia-h100-80gb-hbm3"
    assert any(free in m for m in pending), pending
    h100 = DRA_GPUS[1]
    every = {h100.uuid(i) for i in range(h100.count)}
    assert [set(h.split(",")) for h in held] == [every, every]
    assert wait_until(lambda: not listed(dra_kube, namespace, "resourceclaims"), 60, 0.5)


def test_each_rank_pod_of_a_gang_gets_its_own_claim_of_devices_on_its_node(
    dra_kube: RealKube, namespace: str, dagster_home: Path, tmp_path: Path
) -> None:
    """A 2-node gang with one GPU per node: one claim per rank pod, from the Job's template."""
    executor = executor_config(dra_kube, namespace)
    executor["kubernetes"]["gang_workdir"] = str(tmp_path / "gangs")
    out_dir = tmp_path / "ranks"
    out_dir.mkdir()
    run_config = {
        "execution": {"config": executor},
        "ops": {"gang_gpus": {"config": {"out_dir": str(out_dir)}}},
    }
    with (
        DagsterInstance.get() as instance,
        execute_job(
            reconstructable(gang_gpus_job), instance=instance, run_config=run_config
        ) as result,
    ):
        assert result.success, engine_messages(instance, result.run_id)
        reserved = step_usage(instance, result.run_id, "gang_gpus")
    # one device per rank pod's claim, two rank pods: 2 GPUs × the step's wall time, and the
    # GPU a rank held while the other was not running yet (each rounded to 0.01 s)
    wall = reserved["k8s_ai/wall_seconds"]
    running = reserved["k8s_ai/gpu_seconds"] - reserved["k8s_ai/waste_gang_waiting_gpu_seconds"]
    assert wall > 0 and running == pytest.approx(2 * wall, abs=0.03)
    seen = [json.loads((out_dir / f"rank-{rank}").read_text()) for rank in (0, 1)]
    assert sorted(s["node"] for s in seen) == ["dra-a100", "dra-h100"]
    for rank in seen:
        node = next(g for g in DRA_GPUS if g.node == rank["node"])
        (device,) = rank["NVIDIA_VISIBLE_DEVICES"].split(",")
        assert device in {node.uuid(i) for i in range(node.count)}, rank
    pods = client.CoreV1Api(dra_kube.host.api_client()).list_namespaced_pod(namespace).items
    claims = {s.resource_claim_name for p in pods for s in p.status.resource_claim_statuses}
    assert len(pods) == 2 and len(claims) == 2, claims  # one claim per rank pod
    assert wait_until(lambda: not listed(dra_kube, namespace, "resourceclaims"), 60, 0.5), listed(
        dra_kube, namespace, "resourceclaims"
    )


def test_a_gang_whose_nodes_cannot_each_offer_its_devices_is_refused_before_anything_is_created(
    dra_kube: RealKube, namespace: str, dagster_home: Path, tmp_path: Path
) -> None:
    """An H100 on each of two nodes, and one node has H100s: refused at pre-flight, whole."""
    executor = executor_config(dra_kube, namespace)
    executor["kubernetes"]["gang_workdir"] = str(tmp_path / "gangs")
    with (
        DagsterInstance.get() as instance,
        execute_job(
            reconstructable(gang_h100_job),
            instance=instance,
            run_config={"execution": {"config": executor}},
            raise_on_error=False,
        ) as result,
    ):
        assert not result.success
        failure = str(result.failure_data_for_node("gang_h100") or result.dagster_run)
        said = failure + "\n".join(engine_messages(instance, result.run_id))
    assert "on each of 2 nodes (one claim per rank pod), and only 1 node offers that" in said
    api = dra_kube.host.api_client()
    assert not client.BatchV1Api(api).list_namespaced_job(namespace).items
    assert not client.CoreV1Api(api).list_namespaced_pod(namespace).items
    assert not listed(dra_kube, namespace, "resourceclaimtemplates")


def test_a_gang_some_of_whose_ranks_cannot_get_devices_is_deleted_whole_with_its_claims(
    dra_kube: RealKube, namespace: str, tmp_path: Path
) -> None:
    """All-or-nothing: another step holds the H100 node's four devices, so of a gang asking
    for four GPUs on each of two nodes only the A100 rank runs; the gang is deleted whole
    after its all-running timeout, and its running rank's claim goes with it."""
    raw = executor_config(dra_kube, namespace)["kubernetes"]
    raw["gang_workdir"] = str(tmp_path / "gangs")
    raw["tenants"]["gpus"]["gang_admission"] = {"all_running_timeout_s": 5}
    backend = KubernetesBackend(KubernetesConfig.from_dict(raw), default_tenant="gpus")
    hold = [sys.executable, "-c", "import time; time.sleep(120)"]
    four = {"cpu": 0.5, "memory": "256Mi"}
    holder = LaunchRequest(
        "run-hold", "hold", 0, hold, {}, resolve_spec({**four, "gpu": 4, "gpu_type": H100})
    )
    gang = LaunchRequest(
        "run-gang", "gang", 0, hold, {}, resolve_spec({**four, "nodes": 2, "gpus_per_node": 4})
    )
    try:
        held = backend.submit(holder)
        assert wait_until(lambda: backend.status(held).state == StepState.RUNNING, 60, 0.2)
        handle = backend.submit(gang)
        failed = wait_until(lambda: backend.status(handle).state == StepState.FAILED, 90, 0.5)
        status = backend.status(handle)
        assert failed, status
        assert status.reason == FailureReason.UNSCHEDULABLE, status
        assert "only 1 of 2 pods were running" in status.message, status.message
        assert "cannot allocate all claims" in status.message  # the rank waited for devices
        backend.cancel(held)
    finally:
        backend.close()
    core = client.CoreV1Api(dra_kube.host.api_client())

    def left() -> list[str]:
        pods = [p.metadata.name for p in core.list_namespaced_pod(namespace).items]
        return pods + [c["metadata"]["name"] for c in listed(dra_kube, namespace, "resourceclaims")]

    assert wait_until(lambda: not left(), 60, 0.5), left()


def test_a_dra_steps_gpu_seconds_are_its_allocated_devices_times_its_wall_time(
    dra_kube: RealKube, namespace: str
) -> None:
    """Usage counts the devices in the claim's allocation, read while the pod runs (the claim
    goes with the pod); with whole GPUs that is the asked count."""
    config = KubernetesConfig.from_dict(executor_config(dra_kube, namespace)["kubernetes"])
    backend = KubernetesBackend(config, default_tenant="gpus")
    code = "import time; time.sleep(2)"
    spec = resolve_spec({"cpu": 0.5, "memory": "256Mi", "gpu": 2})
    request = LaunchRequest("run-usage", "two", 0, [sys.executable, "-c", code], {}, spec)
    try:
        handle = backend.submit(request)
        running = wait_until(lambda: backend.status(handle).state == StepState.RUNNING, 60, 0.1)
        assert running, backend.status(handle)
        (claim,) = listed(dra_kube, namespace, "resourceclaims")
        assert len(claim["status"]["allocation"]["devices"]["results"]) == 2
        assert wait_until(lambda: backend.status(handle).state == StepState.SUCCEEDED, 60, 0.2)
        usage = backend.usage(handle)
    finally:
        backend.close()
    assert usage.wall_seconds > 0
    assert usage.gpu_seconds == pytest.approx(2 * usage.wall_seconds)
    assert wait_until(lambda: not listed(dra_kube, namespace, "resourceclaims"), 60, 0.5)


def test_a_cancelled_dra_step_leaves_no_job_pod_claim_or_template(
    dra_kube: RealKube, namespace: str
) -> None:
    config = KubernetesConfig.from_dict(executor_config(dra_kube, namespace)["kubernetes"])
    backend = KubernetesBackend(config, default_tenant="gpus")
    code = "import time; print('holding', flush=True); time.sleep(120)"
    spec = resolve_spec(
        {"cpu": 0.5, "memory": "256Mi", "gpu": 1, "gpu_type": "nvidia-a100-sxm4-80gb"}
    )
    request = LaunchRequest("run-cancel", "hold", 0, [sys.executable, "-c", code], {}, spec)
    try:
        handle = backend.submit(request)
        running = wait_until(lambda: backend.status(handle).state == StepState.RUNNING, 60, 0.2)
        assert running, backend.status(handle)
        assert listed(dra_kube, namespace, "resourceclaims")  # allocated while it runs
        backend.cancel(handle)
    finally:
        backend.close()
    api = dra_kube.host.api_client()

    def left() -> list[str]:
        jobs = client.BatchV1Api(api).list_namespaced_job(namespace).items
        pods = client.CoreV1Api(api).list_namespaced_pod(namespace).items
        return (
            [j.metadata.name for j in jobs]
            + [p.metadata.name for p in pods]
            + [
                o["metadata"]["name"]
                for plural in ("resourceclaims", "resourceclaimtemplates")
                for o in listed(dra_kube, namespace, plural)
            ]
        )

    assert wait_until(lambda: not left(), 60, 0.5), left()


def test_an_adopted_dra_job_whose_creator_died_before_its_template_gets_it_and_runs(
    dra_kube: RealKube, namespace: str
) -> None:
    """A run worker killed between the Job's create and its template's: the resumed worker
    adopts the Job, creates the template, and the step runs."""
    raw = executor_config(dra_kube, namespace)["kubernetes"]
    config = KubernetesConfig.from_dict(raw)
    spec = resolve_spec({"cpu": 0.5, "memory": "256Mi", "gpu": 1})
    code = "import os; print(os.environ['NVIDIA_VISIBLE_DEVICES'], flush=True)"
    request = LaunchRequest(
        "run-adopt", "late", 0, [sys.executable, "-c", code], {}, spec, tenant="gpus"
    )
    api = dra_kube.host.api_client()
    manifest = build_job(request, config.tenant("gpus"), config)
    client.BatchV1Api(api).create_namespaced_job(namespace, manifest)  # and no template
    backend = KubernetesBackend(config, default_tenant="gpus")
    try:
        handle = backend.adopt(request)
        assert handle is not None
        ended = wait_until(
            lambda: backend.status(handle).state in (StepState.SUCCEEDED, StepState.FAILED),
            60,
            0.2,
        )
        assert ended and backend.status(handle).state == StepState.SUCCEEDED
        assert backend.logs(handle).strip().startswith("GPU-")
    finally:
        backend.close()


def test_the_real_scheduler_applies_the_model_selector_and_says_why_a_claim_waits(
    dra_kube: RealKube, namespace: str
) -> None:
    """The product's selector on a claim of our own, past the pre-flight: the kube-scheduler
    finds no device of the model and says so in its own words."""
    gpus = GpuRequest.from_dict({"request": "dra", "device_class": DRIVER}, "g")
    exactly = {
        "deviceClassName": DRIVER,
        "allocationMode": "ExactCount",
        "count": 1,
        "selectors": [{"cel": {"expression": model_selector(gpus, "nvidia-b200")}}],
    }
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "b200"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": exactly}]}},
    }
    api = dra_kube.host.api_client()
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        *RESOURCE, namespace, "resourceclaims", claim
    )
    pod = {
        "metadata": {"name": "waits"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "command": ["true"],
                    "resources": {"claims": [{"name": "gpus"}]},
                }
            ],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": "b200"}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
    }
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(namespace, pod)

    def scheduler_said() -> str:
        events = core.list_namespaced_event(namespace).items
        return " ".join(e.message or "" for e in events if e.reason == "FailedScheduling")

    assert wait_until(lambda: "cannot allocate all claims" in scheduler_said(), 60, 0.5), (
        scheduler_said()
    )
    assert core.read_namespaced_pod("waits", namespace).spec.node_name is None
    core.delete_namespaced_pod("waits", namespace, grace_period_seconds=0)


def claim_devices_of(kube: RealKube, namespace: str) -> dict[str, list[str]]:
    """Each allocated claim of the namespace → its devices."""
    return {
        claim["metadata"]["name"]: [
            r["device"] for r in claim["status"]["allocation"]["devices"]["results"]
        ]
        for claim in listed(kube, namespace, "resourceclaims")
        if (claim.get("status") or {}).get("allocation")
    }


def test_a_partition_step_and_a_whole_gpu_step_share_one_nodes_gpus_at_the_same_time(
    dra_kube: RealKube, namespace: str, tmp_path: Path
) -> None:
    """On the H100 node, whose slices offer whole GPUs and their 1g.10gb partitions: a step
    of three whole GPUs and a step of two 1g.10gb partitions run at once. The scheduler puts
    the partitions on the fourth GPU (the shared counters forbid a whole GPU's partitions
    while it is allocated); the partition step sees MIG devices, and its GPU-seconds are its
    share of one GPU (2 × 10Gi of 80Gi). No claim is left."""
    config = KubernetesConfig.from_dict(executor_config(dra_kube, namespace)["kubernetes"])
    backend = KubernetesBackend(config, default_tenant="gpus")
    release = tmp_path / "release"
    code = (
        "import os, time\n"
        "print('devices', os.environ.get('NVIDIA_VISIBLE_DEVICES'), flush=True)\n"
        f"while not os.path.exists({str(release)!r}): time.sleep(0.1)\n"
    )
    command = [sys.executable, "-c", code]
    whole = resolve_spec({"cpu": 0.5, "memory": "256Mi", "gpu": 3, "gpu_type": H100})
    part = resolve_spec(
        {"cpu": 0.5, "memory": "256Mi", "gpu": 2, "gpu_type": H100, "gpu_partition": "1g.10gb"}
    )
    h100 = DRA_GPUS[1]
    try:
        handles = {
            "whole": backend.submit(LaunchRequest("run-mig", "whole", 0, command, {}, whole)),
            "part": backend.submit(LaunchRequest("run-mig", "part", 0, command, {}, part)),
        }
        both = wait_until(
            lambda: all(backend.status(h).state == StepState.RUNNING for h in handles.values()),
            90,
            0.2,
        )
        assert both, {k: backend.status(h) for k, h in handles.items()}
        held = sorted(claim_devices_of(dra_kube, namespace).values(), key=len)
        assert len(held) == 2 and len(held[0]) == 2 and len(held[1]) == 3, held
        partitions, gpus = held
        assert all(d.startswith("gpu-") and "-mig-" not in d for d in gpus)
        (free,) = {f"gpu-{i}" for i in range(4)} - set(gpus)
        assert all(d.startswith(f"{free}-mig-1g-10gb-") for d in partitions), (free, held)
        pods = client.CoreV1Api(dra_kube.host.api_client()).list_namespaced_pod(namespace)
        assert {p.spec.node_name for p in pods.items} == {"dra-h100"}
        assert wait_until(lambda: "devices MIG-" in backend.logs(handles["part"]), 30, 0.2)
        shown = backend.logs(handles["part"]).split("devices ", 1)[1].split()[0].split(",")
        assert sorted(shown) == sorted(h100.devices()[d][1] for d in partitions)
        release.write_text("go")
        for handle in handles.values():
            done = wait_until(lambda h=handle: backend.status(h).is_terminal, 60, 0.2)
            assert done and backend.status(handle).state == StepState.SUCCEEDED
        usage = backend.usage(handles["part"])
    finally:
        backend.close()
    assert usage.wall_seconds > 0
    assert usage.gpu_seconds == pytest.approx(0.25 * usage.wall_seconds)
    assert wait_until(lambda: not listed(dra_kube, namespace, "resourceclaims"), 60, 0.5)


def test_a_partition_asked_for_that_no_gpu_offers_is_refused_before_anything_is_created(
    dra_kube: RealKube, namespace: str
) -> None:
    config = KubernetesConfig.from_dict(executor_config(dra_kube, namespace)["kubernetes"])
    backend = KubernetesBackend(config, default_tenant="gpus")
    spec = resolve_spec({"cpu": 0.5, "memory": "256Mi", "gpu": 1, "gpu_partition": "2g.20gb"})
    try:
        with pytest.raises(SubmitError) as refused:
            backend.submit(LaunchRequest("run-mig", "part", 0, ["true"], {}, spec))
    finally:
        backend.close()
    message = str(refused.value)
    assert "step 'part'" in message and "DeviceClass mig.nvidia.com" in message
    assert "no 2g.20gb partition" in message
    assert "pick a gpu_partition the devices offer (1g.10gb, 3g.40gb)" in message
    assert listed(dra_kube, namespace, "resourceclaimtemplates") == []
    batch = client.BatchV1Api(dra_kube.host.api_client())
    assert batch.list_namespaced_job(namespace).items == []


def run_partition_job(
    kube: RealKube,
    namespace: str,
    out_dir: Path,
    job: Any,
    disrupt: Callable[[threading.Event], None] | None = None,
) -> list[str]:
    """Run the one-op `job` (its op records each attempt's devices in `out_dir`) with
    `disrupt(stop)` in a thread beside it; the run must succeed. Its engine messages."""
    (op_name,) = [node.name for node in job.nodes]
    run_config = {
        "execution": {"config": executor_config(kube, namespace)},
        "ops": {op_name: {"config": {"out_dir": str(out_dir)}}},
    }
    stop = threading.Event()
    thread = threading.Thread(target=disrupt, args=(stop,), daemon=True) if disrupt else None
    if thread is not None:
        thread.start()
    try:
        with (
            DagsterInstance.get() as instance,
            execute_job(reconstructable(job), instance=instance, run_config=run_config) as result,
        ):
            messages = engine_messages(instance, result.run_id)
            assert result.success, messages
    finally:
        stop.set()
        if thread is not None:
            thread.join(timeout=10)
    return messages


def assert_every_attempt_got(kube: RealKube, namespace: str, out_dir: Path, profile: str) -> None:
    """Attempts 0 and 1 were each shown a partition of `profile` of an H100, and no claim is
    left."""
    name = f"-mig-{profile.replace('.', '-')}-"
    partitions = {uuid for device, (_, uuid) in DRA_GPUS[1].devices().items() if name in device}
    for attempt in (0, 1):
        seen = json.loads((out_dir / f"attempt-{attempt}").read_text())
        assert seen["NVIDIA_VISIBLE_DEVICES"] in partitions, (attempt, seen)
    assert wait_until(lambda: not listed(kube, namespace, "resourceclaims"), 60, 0.5)


def first_attempt_running(out_dir: Path, stop: threading.Event) -> bool:
    """Wait until the op's first attempt has recorded its devices; False if stopped first."""
    while not stop.is_set() and not (out_dir / "attempt-0").exists():
        stop.wait(0.05)
    return not stop.is_set()


def test_an_oom_relaunched_partition_step_gets_a_partition_of_the_same_profile_again(
    dra_kube: RealKube, namespace: str, dagster_home: Path, tmp_path: Path
) -> None:
    """The 1g.10gb step OOM-killed at 256Mi is relaunched at 512Mi with the same claim: both
    attempts are shown a 1g.10gb partition of an H100."""
    messages = run_partition_job(dra_kube, namespace, tmp_path, mig_hungry_job)
    assert any("OOMKilled" in m for m in messages), messages
    assert_every_attempt_got(dra_kube, namespace, tmp_path, "1g.10gb")


def test_an_evicted_partition_step_gets_a_partition_of_the_same_profile_and_memory_again(
    dra_kube: RealKube, namespace: str, dagster_home: Path, tmp_path: Path
) -> None:
    """A `3g.40gb` step with `gpu_memory="40Gi"` (the memory selector, evaluated by the real
    scheduler) is evicted through the Eviction API while it runs, relaunched, and both its
    attempts are shown a 3g.40gb partition of an H100."""
    core = client.CoreV1Api(dra_kube.host.api_client())

    def evict_the_first_attempt(stop: threading.Event) -> None:
        if not first_attempt_running(tmp_path, stop):
            return
        for pod in core.list_namespaced_pod(namespace).items:
            if (pod.metadata.labels or {}).get("k8s-ai/attempt") == "0":
                body = {"metadata": {"name": pod.metadata.name, "namespace": namespace}}
                core.create_namespaced_pod_eviction(pod.metadata.name, namespace, body)

    messages = run_partition_job(
        dra_kube, namespace, tmp_path, mig_evicted_job, evict_the_first_attempt
    )
    assert any("'mig_evicted' was Evicted; relaunching" in m for m in messages), messages
    assert_every_attempt_got(dra_kube, namespace, tmp_path, "3g.40gb")


def test_a_gpu_memory_no_device_has_is_refused_before_anything_is_created(
    dra_kube: RealKube, namespace: str
) -> None:
    config = KubernetesConfig.from_dict(executor_config(dra_kube, namespace)["kubernetes"])
    backend = KubernetesBackend(config, default_tenant="gpus")
    spec = resolve_spec({"cpu": 0.5, "memory": "256Mi", "gpu": 1, "gpu_memory": "100Gi"})
    try:
        with pytest.raises(SubmitError) as refused:
            backend.submit(LaunchRequest("run-mem", "big", 0, ["true"], {}, spec))
    finally:
        backend.close()
    assert "asks for no device with at least 100Gi of memory (the pool offers no devices)" in str(
        refused.value
    )
    assert listed(dra_kube, namespace, "resourceclaimtemplates") == []


def test_a_preempted_partition_step_resumes_on_a_partition_of_the_same_profile(
    dra_kube: RealKube, namespace: str, dagster_home: Path, tmp_path: Path
) -> None:
    """A preemptible 1g.10gb step is preempted by the real scheduler for a standard pod that
    needs the H100 node's CPU, and relaunched once the pod is gone: both attempts are shown a
    1g.10gb partition of an H100 (the relaunch asks for the same profile and model)."""
    core = client.CoreV1Api(dra_kube.host.api_client())
    hog = {
        "metadata": {"name": "cpu-hog"},
        "spec": {
            "priorityClassName": "k8s-ai-standard",
            "nodeSelector": {"kubernetes.io/hostname": "dra-h100"},
            "tolerations": [{"operator": "Exists"}],
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "hog",
                    "image": "ghcr.io/acme/pipeline:test",
                    "command": ["sleep", "600"],
                    "resources": {"requests": {"cpu": "15800m"}},
                }
            ],
        },
    }

    def preempt_the_first_attempt(stop: threading.Event) -> None:
        if not first_attempt_running(tmp_path, stop):
            return
        core.create_namespaced_pod(namespace, hog)
        while not stop.is_set():  # the hog runs: the step's first pod was preempted for it
            if core.read_namespaced_pod("cpu-hog", namespace).status.phase == "Running":
                break
            stop.wait(0.2)
        core.delete_namespaced_pod("cpu-hog", namespace, grace_period_seconds=0)

    messages = run_partition_job(
        dra_kube, namespace, tmp_path, mig_preemptible_job, preempt_the_first_attempt
    )
    assert any("'mig_preemptible' was Preempted" in m for m in messages), messages
    assert_every_attempt_got(dra_kube, namespace, tmp_path, "1g.10gb")
