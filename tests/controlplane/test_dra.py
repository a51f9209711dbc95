"""GPUs through Dynamic Resource Allocation on the real control plane.

A plane of its own (no tenants: the host is the executor's one tenant, since the tenant syncer
carries no claims) whose node agent plays NVIDIA's DRA driver (`agent/dra.py`): it publishes a
ResourceSlice per node and starts a pod only with the devices the real kube-scheduler
allocated to its claim. Nothing in the product or the agent picks devices.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance, execute_job, reconstructable
from kubernetes import client

from k8s_ai_orchestrator.testing.controlplane import start_control_plane
from k8s_ai_orchestrator.testing.controlplane.agent.dra import DRIVER, DraGpus
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.kube.emulator import wait_until
from k8s_ai_orchestrator.testing.kube.nodes import NodeSpec
from k8s_ai_orchestrator.testing.priorityclasses import install_priority_classes
from tests.controlplane.dra_pipelines import two_h100_job
from tests.support import engine_messages

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
NODES = [
    NodeSpec(name=name, cpu="16", memory="64Gi", taints=(GPU_TAINT,))
    for name in ("dra-a100", "dra-h100")
]
# the A100 node comes first and has room for two: only the model keeps the step off it
DRA_GPUS = [
    DraGpus("dra-a100", count=4, product="NVIDIA A100-SXM4-80GB", architecture="Ampere"),
    DraGpus("dra-h100", count=4, product="NVIDIA H100 80GB HBM3"),
]
NAMESPACE = "dra-steps"
RESOURCE = ("resource.k8s.io", "v1")


@pytest.fixture(scope="module")
def dra_kube(kubeplane_bin_dir: Path) -> Iterator[RealKube]:
    run_dir = Path(tempfile.mkdtemp(prefix="k8sai-draplane-"))
    with start_control_plane(kubeplane_bin_dir, run_dir) as plane:
        with RealKube(plane, NODES, run_dir / "nodes", dra_gpus=DRA_GPUS) as kube:
            api = kube.host.api_client()
            install_priority_classes(api)
            client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
            yield kube
    shutil.rmtree(run_dir, ignore_errors=True)


def executor_config(kube: RealKube) -> dict[str, Any]:
    return {
        "backend": "kubernetes",
        "default_tenant": "gpus",
        "kubernetes": {
            "image": "ghcr.io/acme/pipeline:test",
            "python": sys.executable,
            "command_prefix": [sys.executable, "-m", "dagster"],
            "gpus": {"request": "dra", "device_class": DRIVER},
            "tenants": {
                "gpus": {"kubeconfig": str(kube.plane.host.kubeconfig), "namespace": NAMESPACE}
            },
        },
    }


def listed(kube: RealKube, plural: str) -> list[dict[str, Any]]:
    custom = client.CustomObjectsApi(kube.host.api_client())
    found = custom.list_namespaced_custom_object(*RESOURCE, NAMESPACE, plural)
    return list(found["items"])


def test_a_two_gpu_step_gets_two_devices_of_its_model_on_one_node_and_leaves_no_claim(
    dra_kube: RealKube, dagster_home: Path
) -> None:
    run_config = {"execution": {"config": executor_config(dra_kube)}}
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
    (pod,) = core.list_namespaced_pod(NAMESPACE).items
    assert pod.spec.node_name == "dra-h100"
    assert "nvidia.com/gpu" not in (pod.spec.containers[0].resources.limits or {})
    # the claim the controller made from the template goes once its pod is done
    assert wait_until(lambda: not listed(dra_kube, "resourceclaims"), 60, 0.5), listed(
        dra_kube, "resourceclaims"
    )
    (job,) = batch.list_namespaced_job(NAMESPACE).items
    (template,) = listed(dra_kube, "resourceclaimtemplates")
    assert template["metadata"]["ownerReferences"][0]["uid"] == job.metadata.uid
    batch.delete_namespaced_job(job.metadata.name, NAMESPACE, propagation_policy="Background")
    assert wait_until(lambda: not listed(dra_kube, "resourceclaimtemplates"), 60, 0.5)
