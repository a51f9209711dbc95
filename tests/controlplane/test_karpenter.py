"""Real Karpenter v1.14 (kwok cloud provider) on the host of the real control plane: a pending
pod that fits a NodePool gets a NodeClaim and a Node, and is bound to it; the Node has no Ready
condition until something plays its kubelet (the node agent's adoption, still to come), so its
NodeClaim is never initialized; once the Node is Ready, the pod's removal makes Karpenter
consolidate the empty node away; `xl` and `gpu-8` sized pods get the high-memory and GPU
pools' shapes up to the pool's limit, and Karpenter's events on the pods say why one waits;
nothing stays behind."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.testing.controlplane import ControlPlane
from k8s_ai_orchestrator.testing.controlplane.karpenter import (
    KarpenterProcess,
    launched_nodes,
    start_karpenter,
)
from k8s_ai_orchestrator.testing.controlplane.karpenterpools import (
    AUTOSCALED,
    CATALOG,
    DEFAULT_POOLS,
    GROUP,
    INSTANCE_TYPE_LABEL,
    NODEPOOL_LABEL,
    VERSION,
    catalog_json,
    node_pool,
)
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from tests.kubernetes.k8s_support import NAMESPACE, TENANTS, python_step, tenant_config, wait_until

Obj = dict[str, Any]
# Karpenter batches pending pods for up to 2 s, then launches; the node appears at once.
LAUNCH_BOUND_S = 60.0
# consolidateAfter 5 s, then Karpenter's disruption pass and the node's drain and deletion.
CONSOLIDATION_BOUND_S = 90.0
STATUS_HEARTBEAT_S = 10.0  # how often the test, playing a kubelet, renews a Node's Ready


def test_catalog_holds_the_size_classes_at_their_ends() -> None:
    """The high-memory shape holds an `xl` step (72 CPU / 450Gi), the big GPU shape `gpu-8`."""
    shapes = {entry["name"]: entry["resources"] for entry in json.loads(catalog_json(CATALOG))}
    assert int(shapes["mem-96"]["cpu"]) >= 72 and shapes["mem-96"]["memory"] == "768Gi"
    assert shapes["gpu-8"]["nvidia.com/gpu"] == "8"
    pools = {pool["metadata"]["name"]: pool["spec"] for pool in map(node_pool, DEFAULT_POOLS)}
    assert pools["gpu"]["template"]["spec"]["taints"][0]["key"] == "nvidia.com/gpu"
    assert {p["disruption"]["consolidationPolicy"] for p in pools.values()} == {"WhenEmpty"}


class Host:
    """The host apiserver Karpenter provisions for, as these tests use it."""

    def __init__(self, karpenter: KarpenterProcess) -> None:
        self.karpenter = karpenter
        self.api = karpenter.api_client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.namespace = f"karp-{uuid.uuid4().hex[:6]}"
        self._heartbeats: dict[str, float] = {}  # node → when mark_ready last wrote Ready
        self._ready_since: dict[str, str] = {}
        self.core.create_namespace({"metadata": {"name": self.namespace}})

    def create_pod(self, name: str, cpu: str, memory: str = "1Gi", gpus: int = 0) -> None:
        """A pod asking for `cpu`, `memory` and `gpus` (tolerating the GPU pool's taint) that
        only an autoscaled node takes (the session plane may have the node agent's nodes)."""
        requests = {"cpu": cpu, "memory": memory}
        spec: Obj = {"nodeSelector": dict(AUTOSCALED)}
        if gpus:
            requests["nvidia.com/gpu"] = str(gpus)
            spec["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists"}]
        limits = {k: v for k, v in requests.items() if k == "nvidia.com/gpu"}
        container = {
            "name": "main",
            "image": "probe",
            "command": ["true"],
            "resources": {"requests": requests, "limits": limits},
        }
        pod = {"metadata": {"name": name}, "spec": {**spec, "containers": [container]}}
        self.core.create_namespaced_pod(self.namespace, pod)

    def karpenter_events(self, pod: str) -> list[str]:
        """The messages of the events Karpenter wrote about `pod`."""
        events = self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={pod}"
        )
        return [e.message for e in events.items if e.reporting_component == "karpenter"]

    def pod(self, name: str) -> Obj:
        found = self.core.read_namespaced_pod(name, self.namespace)
        return dict(self.api.sanitize_for_serialization(found))

    def delete_pod(self, name: str) -> None:
        """Grace 0: no kubelet confirms the deletion of a pod bound to a kwok node."""
        self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)

    def node_claims(self, pool: str) -> list[Obj]:
        found = self.custom.list_cluster_custom_object(
            GROUP, VERSION, "nodeclaims", label_selector=f"{NODEPOOL_LABEL}={pool}"
        )
        return list(found["items"])

    def nodes(self, pool: str) -> list[Obj]:
        found = self.core.list_node(label_selector=f"{NODEPOOL_LABEL}={pool}")
        return [dict(self.api.sanitize_for_serialization(n)) for n in found.items]

    def mark_ready(self, node: str) -> None:
        """What a kubelet's status does (and the node agent's adoption will): Ready, with a
        fresh heartbeat at most every 10 s (the node-lifecycle controller turns a node whose
        heartbeat is 50 s old Unknown); a Node already gone is left alone."""
        now = time.monotonic()
        if now - self._heartbeats.get(node, -STATUS_HEARTBEAT_S) < STATUS_HEARTBEAT_S:
            return
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        since = self._ready_since.setdefault(node, stamp)
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "played by the test",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": since,
        }
        try:
            self.core.patch_node_status(node, {"status": {"conditions": [ready]}})
        except ApiException as error:
            if error.status != 404:
                raise
        self._heartbeats[node] = now

    def wait_for(self, check: Callable[[], Any], timeout_s: float, what: str) -> Any:
        """`check()`'s first true result; on timeout the failure shows Karpenter's log tail."""
        deadline = time.monotonic() + timeout_s
        while not (result := check()):
            if time.monotonic() > deadline:
                component = self.karpenter.component
                tail = component.log_tail(5) if component else ""
                raise AssertionError(f"not after {timeout_s:.0f} s: {what}\n{tail}")
            time.sleep(0.5)
        return result

    def close(self) -> None:
        self.core.delete_namespace(self.namespace, grace_period_seconds=0)
        self.api.close()


def condition(obj: Obj, kind: str) -> Obj:
    return next((c for c in obj["status"].get("conditions", []) if c["type"] == kind), {})


@pytest.fixture(scope="module")
def karpenter(karpenter_bin_dir: Path, control_plane: ControlPlane) -> Iterator[KarpenterProcess]:
    """Karpenter with the default pools on the session plane's host; its stop removes the pools
    and fails when Karpenter left a NodeClaim or Node (removed all the same)."""
    assert control_plane.host is not None
    run_dir = Path(tempfile.mkdtemp(prefix="k8sai-karpenter-"))
    process = start_karpenter(karpenter_bin_dir, control_plane.host, run_dir)
    try:
        yield process
    finally:
        process.stop()
        assert process.component is not None and not process.component.running
        with process.api_client() as api:
            assert launched_nodes(client.CoreV1Api(api)) == []
    shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def autoscaled(karpenter: KarpenterProcess) -> Iterator[Host]:
    view = Host(karpenter)
    yield view
    view.close()


@pytest.mark.controlplane
@pytest.mark.karpenter
def test_pending_pod_gets_a_node_of_the_cpu_pool_that_stays_not_ready(autoscaled: Host) -> None:
    host = autoscaled
    host.create_pod("needs-4-cpu", cpu="4")

    claims = host.wait_for(
        lambda: host.node_claims("cpu"), LAUNCH_BOUND_S, "a NodeClaim of pool cpu"
    )
    nodes = host.wait_for(lambda: host.nodes("cpu"), LAUNCH_BOUND_S, "a Node of pool cpu")
    assert len(claims) == 1 and len(nodes) == 1
    node = nodes[0]
    assert node["metadata"]["labels"][INSTANCE_TYPE_LABEL] == "cpu-8"
    assert node["spec"]["providerID"].startswith("kwok://")
    assert host.node_claims("highmem") == [] and host.node_claims("gpu") == []

    name = claims[0]["metadata"]["name"]
    host.wait_for(
        lambda: condition(host.node_claims("cpu")[0], "Registered").get("status") == "True",
        LAUNCH_BOUND_S,
        f"NodeClaim {name} Registered",
    )
    # Registered: Karpenter took its `unregistered` taint off, and the scheduler binds the pod
    # to the Node; no kubelet runs it, and the Node never reports Ready, so the NodeClaim is
    # never initialized (and never a candidate for consolidation).
    node_name = node["metadata"]["name"]
    host.wait_for(
        lambda: host.pod("needs-4-cpu")["spec"].get("nodeName") == node_name,
        LAUNCH_BOUND_S,
        f"the pod bound to {node_name}",
    )
    assert host.pod("needs-4-cpu")["status"]["phase"] == "Pending"
    claim = host.node_claims("cpu")[0]
    assert condition(claim, "Initialized")["status"] == "Unknown"
    assert condition(claim, "Initialized")["reason"] == "NodeNotReady"
    assert condition(host.nodes("cpu")[0], "Ready") == {}

    host.delete_pod("needs-4-cpu")
    host.custom.delete_cluster_custom_object(GROUP, VERSION, "nodeclaims", name)
    host.wait_for(
        lambda: not host.node_claims("cpu") and not host.nodes("cpu"),
        CONSOLIDATION_BOUND_S,
        "the deleted NodeClaim and its Node gone",
    )


@pytest.mark.controlplane
@pytest.mark.karpenter
def test_node_made_ready_is_initialized_and_consolidated_once_empty(autoscaled: Host) -> None:
    host = autoscaled
    host.create_pod("needs-4-cpu", cpu="4")
    node = host.wait_for(lambda: host.nodes("cpu"), LAUNCH_BOUND_S, "a Node of pool cpu")[0]
    name = node["metadata"]["name"]

    host.mark_ready(name)
    host.wait_for(
        lambda: host.pod("needs-4-cpu")["spec"].get("nodeName") == name,
        LAUNCH_BOUND_S,
        f"the pod bound to {name}",
    )
    host.wait_for(
        lambda: condition(host.node_claims("cpu")[0], "Initialized").get("status") == "True",
        LAUNCH_BOUND_S,
        "the NodeClaim Initialized",
    )

    def consolidated() -> bool:
        host.mark_ready(name)  # as a kubelet keeps its node Ready until the node goes
        return not host.node_claims("cpu") and not host.nodes("cpu")

    host.delete_pod("needs-4-cpu")
    host.wait_for(consolidated, CONSOLIDATION_BOUND_S, f"the empty node {name} consolidated away")


@pytest.mark.controlplane
@pytest.mark.karpenter
def test_xl_and_gpu_8_pods_get_their_pools_shapes_up_to_the_pools_limit(autoscaled: Host) -> None:
    host = autoscaled
    # First a pod no shape holds: while the gpu pool has room, Karpenter says so per pool (at
    # the pool's limit it would only say that).
    host.create_pod("too-many-gpus", cpu="8", memory="64Gi", gpus=9)
    host.wait_for(
        lambda: any(
            "no instance type has enough resources" in m and "nodepool In [gpu]" in m
            for m in host.karpenter_events("too-many-gpus")
        ),
        LAUNCH_BOUND_S,
        "Karpenter's event that no shape of pool gpu holds 9 GPUs",
    )
    host.create_pod("mosaic", cpu="72", memory="450Gi")
    for n in range(3):  # the gpu pool's limit (16 GPUs) holds two gpu-8 nodes
        host.create_pod(f"embed-{n}", cpu="8", memory="64Gi", gpus=8)

    host.wait_for(lambda: host.nodes("highmem"), LAUNCH_BOUND_S, "a Node of pool highmem")
    assert [n["metadata"]["labels"][INSTANCE_TYPE_LABEL] for n in host.nodes("highmem")] == [
        "mem-96"
    ]
    host.wait_for(lambda: len(host.nodes("gpu")) == 2, LAUNCH_BOUND_S, "two Nodes of pool gpu")
    for node in host.nodes("gpu"):
        assert node["metadata"]["labels"][INSTANCE_TYPE_LABEL] == "gpu-8"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert host.node_claims("cpu") == []

    def bound() -> set[str]:
        pods = host.core.list_namespaced_pod(host.namespace).items
        return {p.metadata.name for p in pods if p.spec.node_name}

    host.wait_for(lambda: len(bound()) == 3, LAUNCH_BOUND_S, "mosaic and two embed pods bound")
    [waiting] = {f"embed-{n}" for n in range(3)} - bound()
    host.wait_for(
        lambda: any(
            "exceed limits for nodepool (NodePool=gpu)" in m for m in host.karpenter_events(waiting)
        ),
        LAUNCH_BOUND_S,
        f"Karpenter's event that pool gpu is at its limit, on {waiting}",
    )
    assert len(host.nodes("gpu")) == 2

    for pod in ("mosaic", "too-many-gpus", *(f"embed-{n}" for n in range(3))):
        host.delete_pod(pod)
    for claim in host.node_claims("gpu") + host.node_claims("highmem"):
        host.custom.delete_cluster_custom_object(
            GROUP, VERSION, "nodeclaims", claim["metadata"]["name"]
        )
    host.wait_for(
        lambda: not host.nodes("gpu") and not host.nodes("highmem"),
        CONSOLIDATION_BOUND_S,
        "the deleted NodeClaims' Nodes gone",
    )


@pytest.mark.controlplane
@pytest.mark.karpenter
def test_a_step_no_pool_can_hold_waits_with_karpenters_refusal_as_its_reason(
    autoscaled: Host, real_kube: RealKube
) -> None:
    """The executor's 9-GPU step in tenant team-a, whose config declares a GPU pool of 16-GPU
    nodes (a declaration the cluster no longer matches: its largest GPU shape has 8): pre-flight
    lets it wait; Karpenter, on the host, finds no shape for its host pod, and its
    `FailedScheduling`, copied to the tenant pod by the syncer, becomes the step's Pending
    reason, naming the pool. No NodeClaim is made; nothing is left."""
    raw = tenant_config(real_kube)
    raw["tenants"]["team-a"]["node_pools"] = [
        {"name": "gpu", "node": {"cpu": 64, "memory": "512Gi", "gpu": 16}}
    ]
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(raw), allowed_tenants=TENANTS, default_tenant="team-a"
    )
    handle = backend.submit(python_step("pass", step="train", cpu=8, memory="32Gi", gpu=9))
    try:
        word = wait_until(
            real_kube,
            backend,
            handle,
            lambda s: s.message.startswith("Karpenter will not create a node for it: "),
            LAUNCH_BOUND_S,
        )
        assert word.waiting == "FailedScheduling"
        assert (
            "NodePool 'gpu' cannot hold it (no instance type has enough resources)" in word.message
        )
        assert "; the scheduler: 0/" in word.message
        assert autoscaled.node_claims("gpu") == []
    finally:
        backend.cancel(handle)
        backend.close()
    real_kube.wait_for(lambda: real_kube.pods("team-a", NAMESPACE) == [], 120)
