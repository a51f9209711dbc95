"""Tenants list the host's nodes by default, as a vCluster with our recommended values does.

Without them (`sync_nodes=False`, a vCluster without `sync.fromHost.nodes`) the executor's
pre-flight cannot check node sizes, and says so in a warning instead of skipping silently.
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from k8s_ai_orchestrator.backends.base import LaunchRequest
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.spec import resolve_spec
from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(90)]


def _tenant_nodes(emu: KubeEmulator) -> dict[str, client.V1Node]:
    nodes = client.CoreV1Api(emu.tenant("team-a").api_client()).list_node().items
    return {node.metadata.name: node for node in nodes}


def test_a_tenant_lists_the_host_nodes_with_labels_taints_and_allocatable(
    emu: KubeEmulator,
) -> None:
    host = client.CoreV1Api(emu.host.api_client()).list_node().items
    seen = _tenant_nodes(emu)
    assert sorted(seen) == sorted(node.metadata.name for node in host)
    gpu = seen["node-gpu"]
    assert gpu.status.allocatable["nvidia.com/gpu"] == "2"
    assert [(t.key, t.effect) for t in gpu.spec.taints] == [("gpu", "NoSchedule")]
    assert seen["node-b"].metadata.labels["disk"] == "ssd"


def test_a_tenant_follows_added_and_cordoned_host_nodes(emu: KubeEmulator) -> None:
    emu.add_node(NodeSpec("node-late", cpu="2", memory="4Gi"))
    emu.wait_for(lambda: "node-late" in _tenant_nodes(emu))
    emu.drain_node("node-late")
    emu.wait_for(lambda: _tenant_nodes(emu)["node-late"].spec.unschedulable)


@pytest.fixture
def unsynced() -> Iterator[KubeEmulator]:
    with KubeEmulator(nodes=[NodeSpec("node-a")], tenants=["team-a"], sync_nodes=False) as emu:
        api = client.SchedulingV1Api(emu.tenant("team-a").api_client())
        for name in ("k8s-ai-standard", "k8s-ai-preemptible"):
            api.create_priority_class({"metadata": {"name": name}, "value": 1000})
        yield emu


def test_without_node_sync_a_tenant_lists_no_nodes(unsynced: KubeEmulator) -> None:
    assert _tenant_nodes(unsynced) == {}


def test_preflight_warns_that_it_cannot_check_node_sizes_in_a_tenant_without_nodes(
    unsynced: KubeEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    config = KubernetesConfig.from_dict(
        {
            "image": "k8s-ai-test:latest",
            "tenants": {
                "team-a": {"kubeconfig": unsynced.tenant("team-a").kubeconfig_path},
            },
        }
    )
    backend = KubernetesBackend(config, allowed_tenants=("team-a",), default_tenant="team-a")
    request = LaunchRequest(
        run_id=str(uuid.uuid4()),
        step_key="mosaic",
        attempt=0,
        command=[sys.executable, "-c", "pass"],
        env={},
        spec=resolve_spec({"size": "xl"}),
    )
    caplog.set_level(logging.WARNING)
    try:
        backend.validate(request)  # not refused: the fit cannot be known
    finally:
        backend.close()
    assert (
        "step 'mosaic' (xl: 72 CPU / 450Gi): tenant 'team-a' cannot be checked for a node large "
        "enough: it lists no nodes. A step no node can hold is not refused before it runs; it "
        "waits Pending and fails after its timeout. To check it at launch, sync the host's nodes "
        "into it (vCluster values: sync.fromHost.nodes.enabled=true, as in "
        "helm/vcluster-values.yaml)"
    ) in caplog.text
