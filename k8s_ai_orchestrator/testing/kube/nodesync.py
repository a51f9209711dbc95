"""Host nodes shown in a tenant, as vCluster's `sync.fromHost.nodes` (selector all) does.

Our recommended vCluster values (helm/vcluster-values.yaml) sync every host node into the
tenant, so a tenant lists the nodes its pods run on: their labels, taints, cordons, capacity,
allocatable and conditions. The executor's pre-flight reads them to refuse a step no node can
ever hold. `KubeEmulator(sync_nodes=False)` is a tenant without that setting: it lists none.

Example:
    >>> from .store import ClusterState
    >>> cluster = ClusterState()
    >>> host, tenant = cluster.new_store("host"), cluster.new_store("team-a")
    >>> _ = host.put("nodes", {"metadata": {"name": "n1", "labels": {"gpu": "a100"}},
    ...                        "spec": {}, "status": {"allocatable": {"cpu": "8"}}})
    >>> sync_nodes(host, tenant)
    >>> [(n["metadata"]["name"], n["status"]["allocatable"]) for n in tenant.list("nodes")]
    [('n1', {'cpu': '8'})]
"""

from __future__ import annotations

import copy

from .store import Obj, Store, new_uid, now_rfc3339

_SYNCED = ("spec", "status")


def _view(node: Obj) -> Obj:
    meta = node["metadata"]
    return {
        "labels": copy.deepcopy(meta.get("labels") or {}),
        "annotations": copy.deepcopy(meta.get("annotations") or {}),
        **{key: copy.deepcopy(node.get(key) or {}) for key in _SYNCED},
    }


def sync_nodes(host: Store, tenant: Store) -> None:
    """Make the tenant's nodes mirror the host's (adds, updates and removes; no-op if equal)."""
    wanted = {node["metadata"]["name"]: node for node in host.list("nodes")}
    for node in tenant.list("nodes"):
        if node["metadata"]["name"] not in wanted:
            tenant.remove("nodes", "", node["metadata"]["name"])
    for name, host_node in wanted.items():
        view = _view(host_node)
        current = tenant.get("nodes", "", name)
        if current is not None and _view(current) == view:
            continue
        meta = (
            dict(current["metadata"])
            if current
            else {
                "name": name,
                "uid": new_uid(),
                "creationTimestamp": now_rfc3339(),
            }
        )
        meta.update(labels=view["labels"], annotations=view["annotations"])
        node = {"kind": "Node", "apiVersion": "v1", "metadata": meta}
        node.update({key: view[key] for key in _SYNCED})
        tenant.put("nodes", node)
