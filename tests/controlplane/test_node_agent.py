"""The node agent behaves as a kubelet towards the real API server, and the tenant syncer as
vCluster's: what the scheduler, the Job controller and our backend observe."""

from __future__ import annotations

import re
import sys
import threading
import uuid
from typing import Any

import pytest
from kubernetes import client, watch

from k8s_ai_orchestrator.testing.controlplane.kube import RealKube

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]


def _pod(name: str, code: str, grace: int = 30, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": grace,
            "containers": [
                {"name": "main", "image": "python", "command": [sys.executable, "-c", code]}
            ],
            **spec,
        },
    }


def _core(kube: RealKube, server: str) -> client.CoreV1Api:
    view = kube.host if server == "host" else kube.tenant(server)
    return client.CoreV1Api(view.api_client())


def test_registered_nodes_are_ready_untainted_and_hold_a_fresh_lease(
    real_kube: RealKube,
) -> None:
    core = _core(real_kube, "host")
    for node in core.list_node().items:
        ready = {c.type: c.status for c in node.status.conditions}
        assert ready["Ready"] == "True"
        assert ready["MemoryPressure"] == ready["DiskPressure"] == "False"
        taints = {t.key for t in node.spec.taints or []}
        assert "node.kubernetes.io/not-ready" not in taints
        assert node.status.node_info.kubelet_version == "v1.37.2"
    leases = client.CoordinationV1Api(real_kube.host.api_client())
    lease = leases.read_namespaced_lease("big-1", "kube-node-lease")
    assert lease.spec.holder_identity == "big-1" and lease.spec.lease_duration_seconds == 40


def test_gpu_capacity_is_advertised_as_nvidia_com_gpu(real_kube: RealKube) -> None:
    node = _core(real_kube, "host").read_node("gpu-1")
    assert node.status.allocatable["nvidia.com/gpu"] == "4"


def test_a_deleted_pod_gets_sigterm_its_grace_period_and_a_terminal_phase_before_it_goes(
    real_kube: RealKube,
) -> None:
    core = _core(real_kube, "host")
    name = f"graceful-{uuid.uuid4().hex[:6]}"
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('got SIGTERM', flush=True),"
        " time.sleep(1), sys.exit(3)))\n"
        "print('up', flush=True); time.sleep(300)"
    )
    core.create_namespaced_pod("default", _pod(name, code, grace=10))
    real_kube.wait_for(
        lambda: core.read_namespaced_pod(name, "default").status.phase == "Running", 60
    )
    seen: list[tuple[str, str | None]] = []
    stream = watch.Watch()

    def record() -> None:
        for event in stream.stream(
            core.list_namespaced_pod, "default", field_selector=f"metadata.name={name}"
        ):
            seen.append((event["type"], event["object"].status.phase))
            if event["type"] == "DELETED":
                stream.stop()

    watcher = threading.Thread(target=record, daemon=True)
    watcher.start()
    core.delete_namespaced_pod(name, "default")
    watcher.join(timeout=60)
    assert seen[-1] == ("DELETED", "Failed")
    assert ("MODIFIED", "Failed") in seen  # the terminal phase was written before the delete


def test_a_tenant_pod_log_is_followed_through_the_tenant_apiserver(real_kube: RealKube) -> None:
    core = _core(real_kube, "team-a")
    name = f"talker-{uuid.uuid4().hex[:6]}"
    code = "import time\nfor i in range(3):\n    print('line', i, flush=True); time.sleep(0.5)"
    core.create_namespaced_pod("default", _pod(name, code))
    real_kube.wait_for(
        lambda: core.read_namespaced_pod(name, "default").status.phase != "Pending", 60
    )
    response = core.read_namespaced_pod_log(name, "default", follow=True, _preload_content=False)
    text = b"".join(response.stream()).decode()
    assert text == "line 0\nline 1\nline 2\n"
    answer = core.read_namespaced_pod_log(name, "default", timestamps=True, _preload_content=False)
    stamped = answer.data.decode().splitlines()
    assert [line.split(" ", 1)[1] for line in stamped] == ["line 0", "line 1", "line 2"]
    rfc3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z")
    assert all(rfc3339.fullmatch(line.split(" ")[0]) for line in stamped)


def test_a_tenant_pod_is_a_host_pod_under_vclusters_name_and_binds_to_its_node(
    real_kube: RealKube,
) -> None:
    core = _core(real_kube, "team-b")
    name = f"short-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod("default", _pod(name, "print('done')"))
    pod = real_kube.wait_for(
        lambda: (p := core.read_namespaced_pod(name, "default")).status.phase == "Succeeded" and p,
        60,
    )
    host = _core(real_kube, "host").read_namespaced_pod(
        f"{name}-x-default-x-team-b", "vcluster-team-b"
    )
    assert pod.spec.node_name == host.spec.node_name == "big-1"
    assert host.metadata.annotations["vcluster.loft.sh/object-uid"] == pod.metadata.uid
    assert host.metadata.labels["vcluster.loft.sh/managed-by"] == "team-b"
    core.delete_namespaced_pod(name, "default")
    real_kube.wait_for(lambda: not real_kube.pods("host", "vcluster-team-b"), 60)


def test_the_host_keeps_each_tenants_kubeconfig_in_its_vc_secret(real_kube: RealKube) -> None:
    secret = _core(real_kube, "host").read_namespaced_secret("vc-team-a", "vcluster-team-a")
    assert set(secret.data) >= {"config"}
    assert secret.metadata.labels == {"app": "vcluster", "vcluster-name": "team-a"}
