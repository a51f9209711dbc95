"""Faults on demand: disruptions of pods and nodes, and misbehaviour of the API servers.

Example:
    >>> FaultsMixin.inject_errors.__doc__.split(";")[0]
    'The next `count` matching requests get `status` (429 comes with Retry-After: 1)'
"""

from __future__ import annotations

import copy
import threading
from typing import TYPE_CHECKING, Any

from .lifecycle import delete_pod, disrupt, record_event, set_condition
from .routing import FaultRule
from .scheduler import SCHEDULER
from .store import Obj, Store, not_found, now_rfc3339

if TYPE_CHECKING:
    from .kubelet import Kubelet
    from .nodes import NodeSpec
    from .server import ApiServer
    from .store import ClusterState

UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}
CORDONED = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}


class FaultsMixin:
    """The fault-injection half of `KubeEmulator`."""

    servers: dict[str, ApiServer]
    cluster: ClusterState
    kubelet: Kubelet
    host_store: Any
    _wake: threading.Event

    def _pod(self, server: str, namespace: str, name: str) -> tuple[Store, Obj]:
        store = self.cluster.stores[server]
        pod = store.get("pods", namespace, name)
        if pod is None:
            raise not_found("pods", name)
        return store, pod

    def evict_pod(self, tenant: str, namespace: str, name: str) -> None:
        """Evict as the Eviction API: DisruptionTarget/EvictionByEvictionAPI, then SIGTERM."""
        with self.cluster.lock:
            store, pod = self._pod(tenant, namespace, name)
            stored = disrupt(store, pod, "EvictionByEvictionAPI", "Eviction API: evicting")
            delete_pod(store, stored)
        self._wake.set()

    def preempt_pod(self, tenant: str, namespace: str, name: str) -> None:
        """Preempt as the scheduler: DisruptionTarget/PreemptionByScheduler, then SIGTERM."""
        with self.cluster.lock:
            store, pod = self._pod(tenant, namespace, name)
            message = f"{SCHEDULER}: preempting to accommodate a higher priority pod"
            stored = disrupt(store, pod, "PreemptionByScheduler", message)
            node = (pod.get("spec") or {}).get("nodeName", "")
            record_event(
                store,
                stored,
                "Preempted",
                f"Preempted by a pod on node {node}",
                component=SCHEDULER,
            )
            delete_pod(store, stored)
        self._wake.set()

    def _node(self, name: str) -> Obj:
        node = self.host_store.get("nodes", "", name)
        if node is None:
            raise not_found("nodes", name)
        return copy.deepcopy(node)

    def _pods_on(self, node: str) -> list[tuple[Store, Obj]]:
        return [
            (store, pod)
            for store in self.cluster.stores.values()
            for pod in store.list("pods")
            if (pod.get("spec") or {}).get("nodeName") == node
        ]

    def fail_node(self, name: str) -> None:
        """The node stops: its processes die, its pods fail and are deleted (node lost)."""
        with self.cluster.lock:
            node = self._node(name)
            status = node["status"]
            set_condition(
                status,
                "Ready",
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
            )
            node["spec"]["taints"] = [
                *node["spec"].get("taints", []),
                {**UNREACHABLE, "timeAdded": now_rfc3339()},
            ]
            self.host_store.put("nodes", node)
            for store, pod in self._pods_on(name):
                self.kubelet.kill_pod(pod["metadata"]["uid"])
                if pod["status"].get("phase") in ("Succeeded", "Failed"):
                    continue
                lost = _lost_pod(pod)
                stored = disrupt(
                    store,
                    lost,
                    "DeletionByTaintManager",
                    "Taint manager: deleting due to NoExecute taint",
                )
                delete_pod(store, stored, 0)
        self._wake.set()

    def drain_node(self, name: str) -> None:
        """Cordon the node and evict every pod on it (as `kubectl drain`)."""
        with self.cluster.lock:
            node = self._node(name)
            node["spec"]["unschedulable"] = True
            node["spec"]["taints"] = [*node["spec"].get("taints", []), dict(CORDONED)]
            self.host_store.put("nodes", node)
            for store, pod in self._pods_on(name):
                if pod["status"].get("phase") not in ("Succeeded", "Failed"):
                    stored = disrupt(store, pod, "EvictionByEvictionAPI", "Eviction API: evicting")
                    delete_pod(store, stored)
        self._wake.set()

    def add_node(self, spec: NodeSpec) -> None:
        """Add a Ready node to the host cluster."""
        with self.cluster.lock:
            self.host_store.put("nodes", spec.to_object())
        self._wake.set()

    def inject_errors(
        self,
        server: str,
        status: int = 500,
        count: int = 3,
        verb: str | None = None,
        path_regex: str | None = None,
    ) -> None:
        """The next `count` matching requests get `status` (429 comes with Retry-After: 1); verb
        is a Kubernetes verb ("create", "list", "watch"...), path_regex is searched in the path.
        """
        rule = FaultRule("error", count, status=status, verb=verb, path_regex=path_regex)
        self.servers[server].faults.add(rule)

    def reset_connections(self, server: str, count: int = 1) -> None:
        """The next `count` requests have their TCP connection dropped without an answer."""
        self.servers[server].faults.add(FaultRule("reset", count))

    def slow_responses(
        self,
        server: str,
        seconds: float = 0.5,
        count: int = 5,
        verb: str | None = None,
        path_regex: str | None = None,
    ) -> None:
        """The next `count` matching requests (as for `inject_errors`) are carried out at once
        and answered `seconds` late, whether or not their client is still there to read the
        answer: a write committed whose answer is late or lost. (A real API server drops a
        request whose client goes away before it is carried out, as one does during a slow
        admission webhook; only the answer can outlive its client.)"""
        rule = FaultRule("slow", count, seconds=seconds, verb=verb, path_regex=path_regex)
        self.servers[server].faults.add(rule)

    def expire_watches(self, server: str) -> None:
        """Open watches get ERROR 410 Expired and close; older resourceVersions become too old."""
        with self.cluster.lock:
            self.cluster.stores[server].expire_history()

    def restart_server(self, server: str) -> None:
        """Restart an API server on the same port with the same token; its store is kept."""
        self.servers[server].restart()


def _lost_pod(pod: Obj) -> Obj:
    lost = copy.deepcopy(pod)
    status = lost.setdefault("status", {})
    status["phase"] = "Failed"
    for container in status.get("containerStatuses") or []:
        if "running" in (container.get("state") or {}) or "waiting" in (
            container.get("state") or {}
        ):
            container["state"] = {
                "terminated": {
                    "exitCode": 137,
                    "reason": "ContainerStatusUnknown",
                    "message": "The container could not be located when the pod was terminated",
                    "startedAt": (container["state"].get("running") or {}).get("startedAt"),
                    "finishedAt": now_rfc3339(),
                }
            }
            container["ready"], container["started"] = False, False
    return lost
