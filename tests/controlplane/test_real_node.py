"""A real node (kubelet v1.37.2, containerd v2.4, runc, the CNI bridge) on the session control
plane: pods run as containers on this machine's kernel, their output comes back through
`pods/log`, and a memory limit is enforced by the kernel's OOM killer.

Each test starts its own node and stops it; afterwards no shim and no container of it is left.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from realnode_support import machine_state

from k8s_ai_orchestrator.testing.controlplane import ControlPlane
from k8s_ai_orchestrator.testing.controlplane.nodeconfig import (
    REAL_NODE_KEY,
    REAL_NODE_TOLERATION,
)
from k8s_ai_orchestrator.testing.controlplane.realnode import BASE_IMAGE, RealNode

pytestmark = [pytest.mark.controlplane, pytest.mark.realnode, pytest.mark.timeout(600)]


def _pod(name: str, code: str, memory_limit: str | None = None) -> dict[str, Any]:
    """A pod for the real node only: tolerates its taint, selects its label, runs the host's
    Python (`/usr` mounted read-only) on the tiny base image, which is never pulled."""
    container: dict[str, Any] = {
        "name": "main",
        "image": BASE_IMAGE,
        "imagePullPolicy": "Never",
        "command": ["/usr/bin/python3", "-c", code],
        "volumeMounts": [{"name": "usr", "mountPath": "/usr", "readOnly": True}],
    }
    if memory_limit:
        container["resources"] = {"limits": {"memory": memory_limit, "cpu": "500m"}}
    return {
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {REAL_NODE_KEY: "true"},
            "tolerations": [REAL_NODE_TOLERATION],
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 5,
            "containers": [container],
            "volumes": [{"name": "usr", "hostPath": {"path": "/usr", "type": "Directory"}}],
        },
    }


def _wait_for(
    what: str, check: Any, core: client.CoreV1Api, ns: str, timeout_s: float = 120.0
) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if result := check():
            return result
        time.sleep(0.5)
    events = [f"{e.reason}: {e.message}" for e in core.list_namespaced_event(ns).items]
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; events: {events}")


def _terminated(core: client.CoreV1Api, name: str, namespace: str) -> Any:
    pod = core.read_namespaced_pod(name, namespace)
    statuses = pod.status.container_statuses or []
    state = statuses[0].state if statuses else None
    return state.terminated if state is not None else None


def test_pod_on_the_real_node_prints_a_line_and_succeeds(
    real_node: RealNode, namespace: tuple[client.CoreV1Api, str]
) -> None:
    core, ns = namespace
    core.create_namespaced_pod(ns, _pod("hello", "print('hello from a real kubelet')"))

    phase = _wait_for(
        "phase Succeeded",
        lambda: (
            (p := core.read_namespaced_pod("hello", ns).status.phase) in ("Succeeded", "Failed")
            and p
        ),
        core,
        ns,
    )

    pod = core.read_namespaced_pod("hello", ns)
    assert phase == "Succeeded", pod.status
    assert pod.spec.node_name == real_node.name
    assert pod.status.pod_ip.startswith("203.0.113.")
    log = core.read_namespaced_pod_log("hello", ns, _preload_content=False)
    assert log.data.decode() == "hello from a real kubelet\n"
    core.delete_namespaced_pod("hello", ns, grace_period_seconds=0)


def test_memory_limit_is_enforced_by_the_kernel_oom_killer(
    real_node: RealNode, namespace: tuple[client.CoreV1Api, str]
) -> None:
    core, ns = namespace
    allocate = "blob = b'x' * (200 << 20); print(len(blob))"
    core.create_namespaced_pod(ns, _pod("hungry", allocate, memory_limit="64Mi"))

    # The shim's cgroup v1 OOM event may arrive after the exit: the reason can read Error first.
    terminated = _wait_for(
        "the container's OOMKilled",
        lambda: (t := _terminated(core, "hungry", ns)) and t.reason == "OOMKilled" and t,
        core,
        ns,
    )

    assert terminated.exit_code == 137
    _wait_for(
        "phase Failed",
        lambda: core.read_namespaced_pod("hungry", ns).status.phase == "Failed",
        core,
        ns,
        timeout_s=30,
    )
    core.delete_namespaced_pod("hungry", ns, grace_period_seconds=0)


def test_a_crashed_node_is_ended_by_the_next_start(
    control_plane: ControlPlane,
    node_bin_dir: Path,
    real_node_root: Path,
    namespace: tuple[client.CoreV1Api, str],
) -> None:
    core, ns = namespace
    crashed = RealNode(control_plane, node_bin_dir, real_node_root / "crashed")
    before = machine_state(crashed)
    crashed.start()
    core.create_namespaced_pod(ns, _pod("sleeper", "import time; time.sleep(600)"))
    _wait_for(
        "phase Running",
        lambda: core.read_namespaced_pod("sleeper", ns).status.phase == "Running",
        core,
        ns,
    )
    crashed.crash()
    core.delete_namespaced_pod("sleeper", ns, grace_period_seconds=0)
    assert len(crashed.leftovers()) >= 3, crashed.leftovers()  # shim, pause, python

    with RealNode(control_plane, node_bin_dir, real_node_root / "next") as node:
        assert crashed.leftovers() == [], "the next start did not end the crashed node's"
        assert node.leftovers() == []
    assert machine_state(crashed) == before
