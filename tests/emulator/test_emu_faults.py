"""Faults on demand and request accounting."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import urllib3
from emu_support import condition, python_job, python_pod
from kubernetes import client

from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(90)]

SLEEP = "import time; time.sleep(600)"


@pytest.fixture(scope="module")
def emu() -> Iterator[KubeEmulator]:
    nodes = [NodeSpec("node-a", cpu="2", memory="4Gi"), NodeSpec("node-b", cpu="2", memory="4Gi")]
    with KubeEmulator(nodes=nodes, tenants=["team-a"]) as emulator:
        yield emulator
        assert not emulator.controller_errors, emulator.controller_errors[0]


def _get(emu: KubeEmulator, path: str) -> urllib3.BaseHTTPResponse:
    server = emu.tenant("team-a")
    headers = {"Authorization": f"Bearer {server.token}"}
    return urllib3.PoolManager(retries=False).request(
        "GET", server.server_url + path, headers=headers
    )


def test_injected_errors_hit_the_next_matching_requests(emu: KubeEmulator, core, ns: str) -> None:
    emu.inject_errors("team-a", status=500, count=2, verb="list", path_regex="/configmaps")
    for _ in range(2):
        with pytest.raises(client.ApiException) as raised:
            core.list_namespaced_config_map(ns)
        assert raised.value.status == 500
    assert core.list_namespaced_config_map(ns).items is not None


def test_a_429_carries_retry_after(emu: KubeEmulator) -> None:
    emu.inject_errors("team-a", status=429, count=1)
    response = _get(emu, "/api/v1/namespaces/default/pods")
    assert response.status == 429 and response.headers["Retry-After"] == "1"
    assert response.json()["reason"] == "TooManyRequests"


def test_reset_connections_drops_the_connection_without_an_answer(emu: KubeEmulator) -> None:
    emu.reset_connections("team-a", count=1)
    with pytest.raises(urllib3.exceptions.ProtocolError):
        _get(emu, "/api/v1/namespaces/default/pods")
    assert _get(emu, "/api/v1/namespaces/default/pods").status == 200


def test_slow_responses_outlast_a_short_client_timeout(emu: KubeEmulator, core, ns: str) -> None:
    emu.slow_responses("team-a", seconds=1.0, count=4)
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.list_namespaced_pod(ns, _request_timeout=0.2)


def test_a_restarted_server_keeps_its_port_token_and_objects(emu: KubeEmulator, core, ns) -> None:
    core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="kept"))
    )
    url = emu.tenant("team-a").server_url
    response = core.list_namespaced_config_map(
        ns, watch=True, timeout_seconds=30, _preload_content=False
    )
    emu.restart_server("team-a")
    with pytest.raises(urllib3.exceptions.HTTPError):
        response.read()
    assert emu.tenant("team-a").server_url == url
    assert core.read_namespaced_config_map("kept", ns).metadata.name == "kept"


def test_request_counts_by_verb_and_resource(emu: KubeEmulator, core, ns: str) -> None:
    emu.reset_request_counts()
    core.list_namespaced_pod(ns)
    core.list_namespaced_pod(ns)
    core.create_namespaced_pod(ns, python_pod("counted", "pass"))
    core.read_namespaced_pod("counted", ns)
    counts = emu.request_counts("team-a")
    assert counts[("list", "pods")] == 2
    assert counts[("create", "pods")] == 1 and counts[("get", "pods")] == 1
    assert emu.request_counts("host")[("list", "pods")] == 0
    emu.reset_request_counts()
    assert sum(emu.request_counts().values()) == 0


def test_a_failed_node_loses_its_pods_and_the_job_replaces_them(
    emu: KubeEmulator, batch, core, ns: str
) -> None:
    batch.create_namespaced_job(ns, python_job("survivor", SLEEP, backoff_limit=3))
    first = emu.wait_for(
        lambda: [p for p in core.list_namespaced_pod(ns).items if p.status.phase == "Running"]
    )[0]
    node = first.spec.node_name
    emu.fail_node(node)
    replacement = emu.wait_for(  # the lost pod may still read Running for a moment
        lambda: [
            p
            for p in core.list_namespaced_pod(ns).items
            if p.status.phase == "Running" and p.spec.node_name != node
        ],
        timeout=40,
    )[0]
    assert replacement.metadata.uid != first.metadata.uid
    emu.wait_for(lambda: batch.read_namespaced_job_status("survivor", ns).status.failed == 1)
    events = core.list_namespaced_event(ns).items
    assert any(e.reason == "Killing" or e.reason == "SuccessfulCreate" for e in events)
    batch.delete_namespaced_job("survivor", ns, propagation_policy="Background")
    emu.wait_for(lambda: not core.list_namespaced_pod(ns).items)


def test_drain_evicts_pods_and_cordons_the_node(emu: KubeEmulator, core, ns: str) -> None:
    host = client.CoreV1Api(emu.host.api_client())
    ready = [
        n.metadata.name for n in host.list_node().items if condition(n, "Ready").status == "True"
    ]
    core.create_namespaced_pod(
        ns, python_pod("drained", SLEEP, node_selector={"kubernetes.io/hostname": ready[0]})
    )
    emu.wait_for(lambda: core.read_namespaced_pod("drained", ns).status.phase == "Running")
    emu.drain_node(ready[0])
    emu.wait_for(lambda: not core.list_namespaced_pod(ns).items)
    assert host.read_node(ready[0]).spec.unschedulable is True


def test_an_added_node_lets_a_pending_pod_schedule(emu: KubeEmulator, core, ns: str) -> None:
    core.create_namespaced_pod(ns, python_pod("big", "pass", cpu="6"))
    emu.wait_for(lambda: condition(core.read_namespaced_pod("big", ns), "PodScheduled"))
    emu.add_node(NodeSpec("node-big", cpu="8", memory="16Gi"))
    emu.wait_for(lambda: core.read_namespaced_pod("big", ns).status.phase == "Succeeded")
    assert core.read_namespaced_pod("big", ns).spec.node_name == "node-big"


def test_a_pod_the_kubelet_fails_to_sync_holds_up_no_other_pod(
    emu: KubeEmulator, core, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the kubelet's per-pod workers: an error syncing one pod is reported, the other pods
    of the pass are synced all the same, and the failed one is tried again next pass."""
    sync, broken = emu.kubelet._sync, [True]

    def failing_sync(store, pod, node) -> None:  # type: ignore[no-untyped-def]
        if pod["metadata"]["name"] == "a-broken" and broken[0]:
            raise RuntimeError("syncing a-broken failed")
        sync(store, pod, node)

    monkeypatch.setattr(emu.kubelet, "_sync", failing_sync)
    core.create_namespaced_pod(ns, python_pod("a-broken", "pass"))  # synced first in a pass
    core.create_namespaced_pod(ns, python_pod("b-fine", "pass"))
    phase = lambda name: core.read_namespaced_pod(name, ns).status.phase  # noqa: E731
    emu.wait_for(lambda: phase("b-fine") == "Succeeded", timeout=30)
    broken[0] = False
    emu.wait_for(lambda: phase("a-broken") == "Succeeded", timeout=30)
    errors, emu.controller_errors[:] = list(emu.controller_errors), []
    assert errors and all("RuntimeError: syncing a-broken failed" in e for e in errors), errors
