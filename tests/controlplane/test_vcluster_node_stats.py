"""A node's `/stats/summary` read in a tenant (`nodes/<node>/proxy`), through the real vCluster
syncer (team-a of `vcluster_plane`, reached through the syncer's front proxy as a real
vCluster's users reach it) and through ours (team-b): the executor reads it to grow a step that
does not report its memory. Only the tenant's pods are in it, under their tenant names."""

from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

import pytest
from kubernetes import client

from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from tests.plane_fixtures import TENANTS

pytestmark = [pytest.mark.controlplane, pytest.mark.vcluster, pytest.mark.timeout(240)]


def _summary(core: client.CoreV1Api, node: str) -> dict[str, Any]:
    answer = core.connect_get_node_proxy_with_path(node, "stats/summary", _preload_content=False)
    return dict(json.loads(answer.data))


@pytest.mark.parametrize("tenant", TENANTS, ids=["real-vcluster-syncer", "our-syncer"])
def test_a_tenant_reads_its_pod_in_the_node_s_summary(
    vcluster_plane: RealKube, tenant: str
) -> None:
    api = vcluster_plane.tenant(tenant).api_client()
    core = client.CoreV1Api(api)
    name = f"stats-{uuid.uuid4().hex[:6]}"
    container = client.V1Container(
        name="main",
        image="python:3.12-slim",
        command=[sys.executable, "-c", "import time; time.sleep(120)"],
    )
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(containers=[container], restart_policy="Never"),
    )
    core.create_namespaced_pod("default", pod)
    try:
        deadline = time.monotonic() + 60
        node = None
        while node is None or core.read_namespaced_pod(name, "default").status.phase != "Running":
            assert time.monotonic() < deadline, "the pod did not run"
            time.sleep(0.3)
            node = core.read_namespaced_pod(name, "default").spec.node_name
        deadline = time.monotonic() + 60  # the summary is sampled at most every 10 s
        while True:
            summary = _summary(core, node)
            refs = [p["podRef"] for p in summary.get("pods", [])]
            if any(r["name"] == name for r in refs):
                break
            assert time.monotonic() < deadline, f"{name} not in the summary: {refs}"
            time.sleep(1)
        assert summary["node"]["nodeName"] == node
        (ref,) = [r for r in refs if r["name"] == name]
        assert ref["namespace"] == "default"  # the tenant's names, not the host's
        host_names = [r["name"] for r in refs if "-x-" in r["name"]]
        assert not host_names, host_names
    finally:
        core.delete_namespaced_pod(name, "default", grace_period_seconds=0)
        api.close()
