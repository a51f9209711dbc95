"""A tenant namespace being deleted, through the real vCluster syncer (team-a of
`vcluster_plane`) and through ours (team-b): a host event that arrives for one of its pods
(the API server takes nothing new in that namespace) holds up no other pod of the tenant.

Our syncer once stopped its whole pass at such an event: no pod of the tenant was created on
the host until the namespace was gone, and the namespace waited for its pods, which only the
syncer could end."""

from __future__ import annotations

import itertools
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.controlplane.patches import terminating
from k8s_ai_orchestrator.testing.controlplane.syncer.translate import host_name
from tests.plane_fixtures import TENANTS

pytestmark = [pytest.mark.controlplane, pytest.mark.vcluster, pytest.mark.timeout(300)]
HOLD = "k8s-ai.test/hold"  # a finalizer that keeps the namespace terminating


def _sleeper(name: str) -> client.V1Pod:
    container = client.V1Container(
        name="main",
        image="python:3.12-slim",
        command=[sys.executable, "-c", "import time; time.sleep(300)"],
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(containers=[container], restart_policy="Never"),
    )


def _running(core: client.CoreV1Api, name: str, namespace: str, what: str) -> None:
    deadline = time.monotonic() + 90
    while (core.read_namespaced_pod(name, namespace).status.phase or "") != "Running":
        assert time.monotonic() < deadline, f"{what} did not run in 90 s"
        time.sleep(0.3)


@pytest.fixture
def going(vcluster_plane: RealKube, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the tenant with a running pod, then deleted and held terminating."""
    tenant = request.node.callspec.params["tenant"]
    core = client.CoreV1Api(vcluster_plane.tenant(tenant).api_client())
    namespace = f"going-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    vcluster_plane.wait_for(lambda: core.list_namespaced_service_account(namespace).items, 60)
    core.create_namespaced_pod(namespace, _sleeper("first"))
    _running(core, "first", namespace, "the first pod")
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "held", "finalizers": [HOLD]}}
    )
    core.delete_namespace(namespace)
    try:
        refused = _first_refused_event(core, namespace)  # the API now takes nothing new there
        assert refused.status == 403 and terminating(refused), refused  # what our syncer drops
        yield namespace
    finally:
        core.patch_namespaced_config_map("held", namespace, {"metadata": {"finalizers": None}})


@pytest.mark.parametrize("tenant", TENANTS, ids=["real-vcluster-syncer", "our-syncer"])
def test_a_late_event_for_a_namespace_being_deleted_holds_up_no_other_pod(
    vcluster_plane: RealKube, tenant: str, going: str
) -> None:
    host = client.CoreV1Api(vcluster_plane.host.api_client())
    host_namespace = vcluster_plane.host_namespace(tenant)
    late = {
        "metadata": {"generateName": "late.", "namespace": host_namespace},
        "involvedObject": {
            "kind": "Pod",
            "namespace": host_namespace,
            "name": host_name("first", going, tenant),
            "apiVersion": "v1",
        },
        "reason": "Killing",
        "message": "Stopping container main",
        "type": "Normal",
    }
    host.create_namespaced_event(host_namespace, late)  # as the node records it, late
    core = client.CoreV1Api(vcluster_plane.tenant(tenant).api_client())
    name = f"next-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod("default", _sleeper(name))
    try:
        _running(core, name, "default", "a pod of another namespace")
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)


def _first_refused_event(core: client.CoreV1Api, namespace: str) -> client.ApiException:
    """Create events in `namespace` until the API refuses one (its admission sees the
    deletion a moment after the delete returns)."""
    deadline = time.monotonic() + 30
    for n in itertools.count():
        event = {
            "metadata": {"name": f"early.{n}"},
            "involvedObject": {"kind": "Pod", "name": "first", "namespace": namespace},
            "reason": "Scheduled",
            "message": "written before the deletion showed",
        }
        try:
            core.create_namespaced_event(namespace, event)
        except client.ApiException as error:
            return error
        assert time.monotonic() < deadline, f"{namespace}: every event taken for 30 s"
        time.sleep(0.2)
    raise AssertionError("unreachable")
