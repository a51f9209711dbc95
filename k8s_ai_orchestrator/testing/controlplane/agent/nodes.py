"""Register the agent's nodes and keep them Ready, as a kubelet does.

Each node is created with its status (capacity = allocatable, GPUs as `nvidia.com/gpu`,
`Ready=True` and the three pressure conditions `False`, the agent's log port as
`daemonEndpoints.kubeletEndpoint`). A lease in `kube-node-lease` is renewed every 10 s and the
Ready condition's heartbeat every minute, so the node-lifecycle controller removes the
`not-ready` taint the admission plugin puts on a new node and never adds `unreachable`.

A Node that exists already (one an autoscaler's cloud provider created, as Karpenter's kwok
provider does, with no kubelet behind it) is adopted instead: `adopted_status` is the status the
agent patches onto it, sized by the allocatable the provider wrote (its capacity is only the
requests of the pod it was made for), and the heartbeat takes it on with `add`.

Example:
    >>> obj = node_object(NodeSpec("n1", cpu="4", memory="8Gi", gpus=2), "v1.37.2", 10250)
    >>> obj["status"]["allocatable"]["nvidia.com/gpu"], obj["status"]["nodeInfo"]["kubeletVersion"]
    ('2', 'v1.37.2')
    >>> made = {"metadata": {"name": "kwok-gpu-1"}, "status": {"capacity": {"cpu": "8"},
    ...     "allocatable": {"cpu": "63900m", "memory": "511Gi", "nvidia.com/gpu": "8"}}}
    >>> status = adopted_status(made, "v1.37.2", 10250)
    >>> status["capacity"]["cpu"], status["allocatable"]["nvidia.com/gpu"]
    ('63900m', '8')
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from datetime import UTC, datetime
from typing import Any

import psutil
from kubernetes import client
from kubernetes.client.rest import ApiException

from ...kube.nodes import NodeSpec
from ...kube.quantity import GPU
from ..informer import TIMEOUT

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
LEASE_RENEW_S = 10.0
STATUS_HEARTBEAT_S = 60.0
_PRESSURE = ("MemoryPressure", "DiskPressure", "PIDPressure")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _conditions() -> list[dict[str, str]]:
    stamp = _now()
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
    }
    pressure = [
        {"type": kind, "status": "False", "reason": f"KubeletHasNo{kind}", "message": "ok"}
        for kind in _PRESSURE
    ]
    return [
        {**c, "lastHeartbeatTime": stamp, "lastTransitionTime": stamp} for c in (*pressure, ready)
    ]


def age_s(created: str | None, now: datetime | None = None) -> float:
    """Seconds since an object's `creationTimestamp` (infinite when it has none).

    Example:
        >>> age_s("2026-12-03T10:00:00Z", datetime(2026, 12, 3, 10, 0, 30, tzinfo=UTC))
        30.0
    """
    if not created:
        return float("inf")
    since = datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    return ((now or datetime.now(UTC)) - since).total_seconds()


def node_address() -> str:
    """The address the agent's nodes report and serve on: this machine's first IPv4 address
    that is not loopback or link-local (kube-apiserver refuses to proxy to those, so
    `nodes/{node}/proxy` needs it), else 127.0.0.1. `K8S_AI_NODE_ADDRESS` overrides it.

    Example:
        >>> ipaddress.ip_address(node_address()).version
        4
    """
    chosen = os.environ.get("K8S_AI_NODE_ADDRESS")
    if chosen:
        return chosen
    stats = psutil.net_if_stats()
    for name, addresses in sorted(psutil.net_if_addrs().items()):
        if name in stats and not stats[name].isup:
            continue
        for entry in addresses:
            if entry.family != socket.AF_INET:
                continue
            ip = ipaddress.ip_address(entry.address)
            if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified):
                return str(ip)
    return "127.0.0.1"


def node_object(
    spec: NodeSpec, version: str, log_port: int, address: str = "127.0.0.1"
) -> dict[str, Any]:
    """The Node this agent registers for `spec` (status included, as a kubelet sends it)."""
    emulated = spec.to_object()
    capacity = {**emulated["status"]["capacity"], "ephemeral-storage": "100Gi"}
    info = {**emulated["status"]["nodeInfo"], "kubeletVersion": version, "osImage": "k8s-ai"}
    info.update(kubeProxyVersion="", containerRuntimeVersion="k8s-ai-agent://1.0")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": emulated["metadata"]["labels"]},
        "spec": emulated["spec"],
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": _conditions(),
            "addresses": [
                {"type": "InternalIP", "address": address} if a["type"] == "InternalIP" else a
                for a in emulated["status"]["addresses"]
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": log_port}},
            "nodeInfo": info,
        },
    }


def adopted_status(
    node: dict[str, Any], version: str, log_port: int, address: str = "127.0.0.1"
) -> dict[str, Any]:
    """The status the agent patches onto a Node it adopts: what `node_object` reports for a
    node of the Node's allocatable (cpu, memory, `nvidia.com/gpu`), with the agent's address
    and log port."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    spec = NodeSpec(
        node["metadata"]["name"],
        cpu=str(allocatable.get("cpu", "1")),
        memory=str(allocatable.get("memory", "1Gi")),
        gpus=int(allocatable.get(GPU, 0)),
    )
    return dict(node_object(spec, version, log_port, address)["status"])


class NodeHeartbeat:
    """Registers nodes, then renews their leases and Ready heartbeats until stopped; nodes
    adopted later join with `add` and leave with `remove`."""

    def __init__(self, api_client: client.ApiClient, nodes: list[dict[str, Any]]) -> None:
        self.core = client.CoreV1Api(api_client)
        self.leases = client.CoordinationV1Api(api_client)
        self.nodes = nodes
        self.names = [node["metadata"]["name"] for node in nodes]  # the nodes kept alive
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="agent-heartbeat", daemon=True)

    def register(self) -> None:
        """Create each node (replacing a stale one of the same name) and its lease."""
        for node in self.nodes:
            name = node["metadata"]["name"]
            try:
                self.core.create_node(node, **TIMEOUT)
            except ApiException as error:
                if error.status != 409:
                    raise
                self.core.delete_node(name, **TIMEOUT)
                self.core.create_node(node, **TIMEOUT)
            self._renew(name, create=True)
        self._thread.start()

    def add(self, name: str) -> None:
        """Keep an existing Node alive from now on (its lease is created here)."""
        self._renew(name, create=True)
        self.names = [*self.names, name]

    def remove(self, name: str) -> None:
        """Stop renewing a node that is gone (its lease goes with it: the Node owns it)."""
        self.names = [n for n in self.names if n != name]

    def stop(self) -> None:
        """Stop renewing (the nodes stay registered)."""
        self._stop.set()

    def _run(self) -> None:
        since_status = 0.0
        while not self._stop.wait(LEASE_RENEW_S):
            since_status += LEASE_RENEW_S
            for name in self.names:
                try:
                    self._renew(name)
                    if since_status >= STATUS_HEARTBEAT_S:
                        self._heartbeat(name)
                except Exception:  # noqa: BLE001 - refused or timed out (urllib3's error)
                    continue  # the next round tries again, as a kubelet does
            if since_status >= STATUS_HEARTBEAT_S:
                since_status = 0.0

    def _renew(self, name: str, create: bool = False) -> None:
        now = datetime.now(UTC)
        metadata: dict[str, Any] = {"name": name, "namespace": LEASE_NAMESPACE}
        body = {
            "metadata": metadata,
            "spec": {
                "holderIdentity": name,
                "leaseDurationSeconds": LEASE_DURATION_S,
                "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            },
        }
        if create:
            node = self.core.read_node(name, **TIMEOUT)
            metadata["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.metadata.uid}
            ]
            try:
                self.leases.create_namespaced_lease(LEASE_NAMESPACE, body, **TIMEOUT)
                return
            except ApiException as error:
                if error.status != 409:
                    raise
        self.leases.patch_namespaced_lease(name, LEASE_NAMESPACE, {"spec": body["spec"]}, **TIMEOUT)

    def _heartbeat(self, name: str) -> None:
        stamp = _now()
        conditions = [{"type": kind, "lastHeartbeatTime": stamp} for kind in (*_PRESSURE, "Ready")]
        self.core.patch_node_status(
            name,
            {"status": {"conditions": conditions}},
            _content_type="application/strategic-merge-patch+json",
            **TIMEOUT,
        )
