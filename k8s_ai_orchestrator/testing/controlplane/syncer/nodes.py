"""Host nodes shown in a tenant, as vCluster's `sync.fromHost.nodes` (selector: all) does.

Each host node is mirrored with its labels, taints and status, except that its kubelet
endpoint points at the syncer's proxy for that node (the tenant apiserver sends `pods/log`
and the node proxy's `/stats/summary` there).
Only changes are written; a node gone from the host is deleted from the tenant.

Example:
    >>> host = {"metadata": {"name": "n1", "labels": {"a": "b"}}, "spec": {},
    ...         "status": {"allocatable": {"cpu": "8"}}}
    >>> mirror(host, 7000)["status"]["daemonEndpoints"]
    {'kubeletEndpoint': {'Port': 7000}}
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from ..informer import REQUEST_TIMEOUT_S

Obj = dict[str, Any]
_STATUS = ("capacity", "allocatable", "conditions", "addresses", "nodeInfo")


def mirror(host: Obj, log_port: int) -> Obj:
    """The tenant's copy of a host node."""
    status = {k: copy.deepcopy(host["status"][k]) for k in _STATUS if k in host["status"]}
    status["daemonEndpoints"] = {"kubeletEndpoint": {"Port": log_port}}
    spec = {k: v for k, v in (host.get("spec") or {}).items() if k in ("taints", "unschedulable")}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": host["metadata"]["name"],
            "labels": dict(host["metadata"].get("labels") or {}),
        },
        "spec": copy.deepcopy(spec),
        "status": status,
    }


class NodeSync:
    """Keeps a tenant's nodes equal to the host's (see the module docstring)."""

    def __init__(self, virtual: client.CoreV1Api, proxy_port: Callable[[str], int]) -> None:
        self.virtual = virtual
        self.proxy_port = proxy_port  # host node name → the port of its proxy
        self._written: dict[str, Obj] = {}

    def sync(self, host_nodes: list[Obj]) -> None:
        """Create, update or delete tenant nodes so they mirror `host_nodes`."""
        wanted = {
            n["metadata"]["name"]: mirror(n, self.proxy_port(n["metadata"]["name"]))
            for n in host_nodes
        }
        for name, node in wanted.items():
            if self._written.get(name) != node:
                self._write(name, node)
        for name in [n for n in self._written if n not in wanted]:
            try:
                self.virtual.delete_node(name, _request_timeout=REQUEST_TIMEOUT_S)
            except ApiException as error:
                if error.status != 404:
                    raise
            del self._written[name]

    def _write(self, name: str, node: Obj) -> None:
        if name not in self._written:
            try:
                self.virtual.create_node(node, _request_timeout=REQUEST_TIMEOUT_S)
                self._written[name] = node
                return
            except ApiException as error:
                if error.status != 409:
                    raise
        meta_spec = {"metadata": {"labels": node["metadata"]["labels"]}, "spec": node["spec"]}
        self.virtual.patch_node(name, meta_spec, _request_timeout=REQUEST_TIMEOUT_S)
        self.virtual.patch_node_status(
            name, {"status": node["status"]}, _request_timeout=REQUEST_TIMEOUT_S
        )
        self._written[name] = node
