"""Real Karpenter v1.14 (kwok cloud provider) on the host of the session's real control plane,
whose node agent adopts the Nodes Karpenter launches (registers them Ready, keeps their leases,
runs their pods): a pending pod gets a NodeClaim and a Node, runs there and succeeds, and the
empty node is consolidated away; through the executor, in tenant team-a (our syncer), steps on
pools at zero (`xl`, three `gpu-8` past the GPU pool's limit, a 2-node GPU gang) get nodes, run
and succeed, the one past the limit explained by Karpenter's words while it waits; a step no
pool's node holds is refused before anything is created; nothing stays behind."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from k8s_ai_orchestrator.backends.base import LaunchRequest, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.errors import SubmitError
from k8s_ai_orchestrator.spec import resolve_spec
from k8s_ai_orchestrator.stepenv import step_env
from k8s_ai_orchestrator.testing.controlplane.agent.nodes import LEASE_NAMESPACE
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
    declared_pools,
    node_pool,
)
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from tests.kubernetes.k8s_support import NAMESPACE, TENANTS, python_step, tenant_config, wait_until

Obj = dict[str, Any]
# Karpenter batches pending pods for up to 2 s, then launches; the node appears at once.
LAUNCH_BOUND_S = 60.0
# consolidateAfter 5 s, then Karpenter's disruption pass and the node's drain and deletion.
CONSOLIDATION_BOUND_S = 90.0
# A step on a pool at zero: its node launched and adopted, the step's process run.
STEP_BOUND_S = 120.0


def test_catalog_holds_the_size_classes_at_their_ends() -> None:
    """The high-memory shape holds an `xl` step (72 CPU / 450Gi), the big GPU shape `gpu-8`;
    the executor's declaration of the pools says the same."""
    shapes = {entry["name"]: entry["resources"] for entry in json.loads(catalog_json(CATALOG))}
    assert int(shapes["mem-96"]["cpu"]) >= 72 and shapes["mem-96"]["memory"] == "768Gi"
    assert shapes["gpu-8"]["nvidia.com/gpu"] == "8"
    pools = {pool["metadata"]["name"]: pool["spec"] for pool in map(node_pool, DEFAULT_POOLS)}
    assert pools["gpu"]["template"]["spec"]["taints"][0]["key"] == "nvidia.com/gpu"
    assert {p["disruption"]["consolidationPolicy"] for p in pools.values()} == {"WhenEmpty"}
    declared = {pool["name"]: pool for pool in declared_pools()}
    assert declared["highmem"]["node"] == {"cpu": 96, "memory": "768Gi"}
    assert declared["gpu"]["limit"] == {"gpu": "16"}


class Host:
    """The host apiserver Karpenter provisions for, as these tests use it."""

    def __init__(self, karpenter: KarpenterProcess, kube: RealKube) -> None:
        self.karpenter = karpenter
        self.kube = kube
        self.api = karpenter.api_client()
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.namespace = f"karp-{uuid.uuid4().hex[:6]}"
        self.core.create_namespace({"metadata": {"name": self.namespace}})

    def create_pod(self, name: str, cpu: str, command: list[str]) -> None:
        """A pod asking for `cpu` that only an autoscaled node takes (the session plane has
        the node agent's fixed nodes)."""
        container = {
            "name": "main",
            "image": "probe",
            "command": command,
            "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}},
        }
        spec = {
            "nodeSelector": dict(AUTOSCALED),
            "restartPolicy": "Never",
            "containers": [container],
        }
        self.core.create_namespaced_pod(self.namespace, {"metadata": {"name": name}, "spec": spec})

    def pod(self, name: str) -> Obj:
        found = self.core.read_namespaced_pod(name, self.namespace)
        return dict(self.api.sanitize_for_serialization(found))

    def node_claims(self, pool: str) -> list[Obj]:
        found = self.custom.list_cluster_custom_object(
            GROUP, VERSION, "nodeclaims", label_selector=f"{NODEPOOL_LABEL}={pool}"
        )
        return list(found["items"])

    def nodes(self, pool: str | None = None) -> list[Obj]:
        selector = f"{NODEPOOL_LABEL}={pool}" if pool else NODEPOOL_LABEL
        found = self.core.list_node(label_selector=selector)
        return [dict(self.api.sanitize_for_serialization(n)) for n in found.items]

    def leases(self) -> list[str]:
        """The node leases of Karpenter's nodes (the agent keeps one per adopted node)."""
        launched = set(launched_nodes(self.core))
        found = client.CoordinationV1Api(self.api).list_namespaced_lease(LEASE_NAMESPACE)
        return [lease.metadata.name for lease in found.items if lease.metadata.name in launched]

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

    def explain(self) -> str:
        """Karpenter's nodes, NodeClaims and log tail: what a failed wait shows."""
        nodes = [
            (n["metadata"]["name"], n["spec"].get("taints"), condition(n, "Ready").get("status"))
            for n in self.nodes()
        ]
        claims = self.custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims")["items"]
        states = [
            (c["metadata"]["name"], [(k["type"], k["status"]) for k in c["status"]["conditions"]])
            for c in claims
            if "conditions" in c.get("status", {})
        ]
        component = self.karpenter.component
        tail = component.log_tail(15) if component else ""
        return f"nodes {nodes}\nNodeClaims {states}\nadopted {self.kube.adopted()}\n{tail}"

    def wait_consolidated(self) -> None:
        """Every node Karpenter launched is gone, and the agent let go of it."""
        self.wait_for(
            lambda: not self.nodes() and not self.kube.adopted(),
            CONSOLIDATION_BOUND_S,
            "the empty nodes consolidated away and released by the node agent",
        )

    def close(self) -> None:
        self.core.delete_namespace(self.namespace, grace_period_seconds=0)
        self.api.close()


def condition(obj: Obj, kind: str) -> Obj:
    return next((c for c in obj["status"].get("conditions", []) if c["type"] == kind), {})


@pytest.fixture(scope="module")
def karpenter(karpenter_bin_dir: Path, plane_with_nodes: RealKube) -> Iterator[KarpenterProcess]:
    """Karpenter with the default pools on the session plane's host, whose node agent adopts
    the Nodes it launches; its stop removes the pools and fails when Karpenter left a
    NodeClaim or Node (removed all the same)."""
    assert plane_with_nodes.plane.host is not None
    run_dir = Path(tempfile.mkdtemp(prefix="k8sai-karpenter-"))
    process = start_karpenter(karpenter_bin_dir, plane_with_nodes.plane.host, run_dir)
    try:
        yield process
    finally:
        process.stop()
        assert process.component is not None and not process.component.running
        with process.api_client() as api:
            assert launched_nodes(client.CoreV1Api(api)) == []
    shutil.rmtree(run_dir, ignore_errors=True)


@pytest.fixture
def autoscaled(karpenter: KarpenterProcess, real_kube: RealKube) -> Iterator[Host]:
    view = Host(karpenter, real_kube)
    yield view
    view.close()


def autoscaled_backend(kube: RealKube, **tenant: Any) -> KubernetesBackend:
    """The executor's backend on tenant team-a, whose config declares the default pools; its
    steps' pods select the pools' label (`step_k8s_config`), as a platform's steps that must
    run on autoscaled nodes would."""
    raw = tenant_config(
        kube,
        step_k8s_config={"pod_spec_config": {"node_selector": dict(AUTOSCALED)}},
        gang_workdir=tempfile.mkdtemp(prefix="k8sai-karpenter-gangs-"),
    )
    raw["tenants"]["team-a"].update(node_pools=declared_pools(), **tenant)
    return KubernetesBackend(
        KubernetesConfig.from_dict(raw), allowed_tenants=TENANTS, default_tenant="team-a"
    )


def host_pods(kube: RealKube) -> list[Obj]:
    return kube.pods("host", kube.host_namespace("team-a"))


def pool_of(host: Host, node_name: str) -> str:
    labels = host.core.read_node(node_name).metadata.labels or {}
    return str(labels.get(NODEPOOL_LABEL, ""))


@pytest.mark.controlplane
@pytest.mark.karpenter
def test_a_pending_pod_gets_a_node_the_agent_adopts_runs_there_and_the_empty_node_goes(
    autoscaled: Host,
) -> None:
    host = autoscaled
    # it runs 5 s: consolidation, which removes the node and with it the pod, comes later
    host.create_pod("needs-4-cpu", cpu="4", command=["sleep", "5"])

    claims = host.wait_for(
        lambda: host.node_claims("cpu"), LAUNCH_BOUND_S, "a NodeClaim of pool cpu"
    )
    node = host.wait_for(lambda: host.nodes("cpu"), LAUNCH_BOUND_S, "a Node of pool cpu")[0]
    name = node["metadata"]["name"]
    assert len(claims) == 1
    assert node["metadata"]["labels"][INSTANCE_TYPE_LABEL] == "cpu-8"
    assert node["spec"]["providerID"].startswith("kwok://")
    # adopted: Ready, sized by the shape (kwok's capacity was only the pod's requests)
    host.wait_for(
        lambda: condition(host.nodes("cpu")[0], "Ready").get("status") == "True",
        LAUNCH_BOUND_S,
        f"{name} Ready",
    )
    assert host.nodes("cpu")[0]["status"]["capacity"]["cpu"] == "7900m"
    host.wait_for(lambda: host.leases() == [name], LAUNCH_BOUND_S, f"the lease of {name}")
    host.wait_for(
        lambda: condition(host.node_claims("cpu")[0], "Initialized").get("status") == "True",
        LAUNCH_BOUND_S,
        "the NodeClaim Initialized",
    )
    host.wait_for(
        lambda: host.pod("needs-4-cpu")["status"]["phase"] == "Running",
        LAUNCH_BOUND_S,
        "the pod running on the node",
    )
    assert host.pod("needs-4-cpu")["spec"]["nodeName"] == name
    host.wait_for(
        lambda: host.pod("needs-4-cpu")["status"]["phase"] == "Succeeded",
        LAUNCH_BOUND_S,
        "the pod Succeeded",
    )
    assert host.node_claims("highmem") == [] and host.node_claims("gpu") == []

    host.wait_consolidated()  # a Succeeded pod leaves its node empty
    assert host.node_claims("cpu") == [] and host.leases() == []


@pytest.mark.controlplane
@pytest.mark.karpenter
def test_xl_and_gpu_8_steps_on_pools_at_zero_get_nodes_up_to_the_pools_limit_and_succeed(
    autoscaled: Host, real_kube: RealKube, tmp_path: Path
) -> None:
    """An `xl` step and three `gpu-8` steps whose pods select the autoscaled pools (no node
    exists there): pre-flight lets them wait; Karpenter launches a `mem-96` node of `highmem`
    and two `gpu-8` nodes of `gpu` (its limit is 16 GPUs); the third GPU step waits, and its
    Pending reason is Karpenter's word that the pool is at its limit; once the first two end,
    it runs on a node they left. All four succeed; the empty nodes go."""
    host = autoscaled
    release = tmp_path / "release"
    hold = f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.2)"
    backend = autoscaled_backend(real_kube)
    handles = {
        "mosaic": backend.submit(python_step("pass", step="mosaic", cpu=72, memory="450Gi")),
        **{
            f"embed-{n}": backend.submit(
                python_step(hold, step=f"embed-{n}", cpu=8, memory="64Gi", gpu=8)
            )
            for n in range(3)
        },
    }
    try:
        host.wait_for(lambda: len(host.nodes("gpu")) == 2, LAUNCH_BOUND_S, "two gpu nodes")
        gpu_nodes = host.nodes("gpu")
        assert {n["metadata"]["labels"][INSTANCE_TYPE_LABEL] for n in gpu_nodes} == {"gpu-8"}

        embeds = {f"embed-{n}" for n in range(3)}

        def running() -> set[str]:  # GPU steps only: the xl step may run at the same moment
            return {k for k in embeds if backend.status(handles[k]).state == StepState.RUNNING}

        host.wait_for(lambda: len(running()) == 2, STEP_BOUND_S, "two GPU steps running")
        [waiting] = embeds - running()  # the two hold their nodes until released
        word = wait_until(
            real_kube,
            backend,
            handles[waiting],
            lambda s: "NodePool 'gpu' is at its limit" in s.message,
            LAUNCH_BOUND_S,
        )
        assert word.state == StepState.PENDING
        assert word.message.startswith("Karpenter will not create a node for it: ")
        assert len(host.nodes("gpu")) == 2

        release.write_text("go")
        for step, handle in handles.items():
            try:
                done = wait_until(real_kube, backend, handle, lambda s: s.is_terminal, STEP_BOUND_S)
            except AssertionError as error:
                raise AssertionError(f"{step}: {error}\n{host.explain()}") from None
            assert done.state == StepState.SUCCEEDED, (step, done, backend.logs(handle))
        pools = {pool_of(host, pod["spec"]["nodeName"]) for pod in host_pods(real_kube)}
        assert pools == {"highmem", "gpu"}
        assert len(host.nodes("highmem")) <= 1 and len(host.node_claims("gpu")) <= 2
    finally:
        for handle in handles.values():
            backend.cancel(handle)
        backend.close()
    host.wait_consolidated()


def gpu_gang(code: str, run_id: str) -> LaunchRequest:
    """A 2-node gang of one `gpu-8` pod per node, with the environment the executor gives
    every step (so `Gang.run` finds its ranks)."""
    spec = resolve_spec({"cpu": 8, "memory": "64Gi", "nodes": 2, "gpus_per_node": 8})
    env = step_env(
        backend="kubernetes", run_id=run_id, step_key="train", attempt=0, spec=spec, grace_s=5
    )
    return LaunchRequest(run_id, "train", 0, [sys.executable, "-c", code], env, spec, "team-a")


@pytest.mark.controlplane
@pytest.mark.karpenter
def test_a_two_node_gang_on_the_gpu_pool_at_zero_gets_both_nodes_and_runs_all_or_nothing(
    autoscaled: Host, real_kube: RealKube
) -> None:
    """The guard creates the gang's Job because the GPU pool can create both its nodes; both
    ranks run, each on its own new `gpu-8` node, and the gang succeeds."""
    host = autoscaled
    code = (
        "import socket\n"
        "from k8s_ai_orchestrator.gang import Gang\n"
        "print('RESULT', Gang(straggler_timeout_s=120).run(socket.gethostname))\n"
    )
    backend = autoscaled_backend(real_kube)
    handle = backend.submit(gpu_gang(code, f"gang-{uuid.uuid4().hex[:6]}"))
    try:
        done = wait_until(real_kube, backend, handle, lambda s: s.is_terminal, STEP_BOUND_S)
        assert done.state == StepState.SUCCEEDED, (done, backend.logs(handle))
        nodes = {pod["spec"]["nodeName"] for pod in host_pods(real_kube)}
        assert len(nodes) == 2 and {pool_of(host, n) for n in nodes} == {"gpu"}
        assert "RESULT" in backend.logs(handle)
    finally:
        backend.cancel(handle)
        backend.close()
    host.wait_consolidated()


@pytest.mark.controlplane
@pytest.mark.karpenter
def test_a_step_no_pools_node_holds_is_refused_before_anything_is_created(
    autoscaled: Host, real_kube: RealKube
) -> None:
    backend = autoscaled_backend(real_kube)
    try:
        with pytest.raises(SubmitError) as refused:
            backend.submit(python_step("pass", step="huge", cpu=8, memory="64Gi", gpu=9))
    finally:
        backend.close()
    message = str(refused.value)
    assert "step 'huge'" in message and "can never run in tenant 'team-a'" in message
    assert "pool 'gpu' creates nodes of at most gpu 8" in message
    assert real_kube.jobs("team-a", NAMESPACE) == [] and host_pods(real_kube) == []
    assert autoscaled.node_claims("gpu") == []


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
