"""The syncer's node proxies: a host node's kubelet endpoints as one tenant sees them.

A tenant's copy of a host node (`nodes.py`) points its kubelet endpoint at this tenant's proxy
for that node, started on first use. The tenant apiserver sends `pods/log` and the node
proxy's `/stats/summary` there: logs are read under the host pod's name, and the summary keeps
only this tenant's pods, under their tenant names, as vCluster's node proxy shows them.

Example:
    >>> summary = {"node": {"nodeName": "n1"}, "pods": [
    ...     {"podRef": {"name": "a-x-default-x-team-a", "namespace": "vcluster-team-a"}},
    ...     {"podRef": {"name": "web", "namespace": "kube-system"}}]}
    >>> refs = {"a-x-default-x-team-a": {"name": "a", "namespace": "default", "uid": "t1"}}
    >>> tenant_summary(summary, "vcluster-team-a", refs)["pods"]
    [{'podRef': {'name': 'a', 'namespace': 'default', 'uid': 't1'}}]
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from .. import pki
from ..agent.logserver import LogLookup, LogServer
from ..informer import Obj
from . import translate


def tenant_summary(summary: Obj, host_namespace: str, refs: dict[str, Obj]) -> Obj:
    """A host node's `/stats/summary` with only the pods in `refs` (host pod name → the
    tenant's podRef), named as the tenant names them."""
    pods = []
    for pod in summary.get("pods") or []:
        ref = pod.get("podRef") or {}
        if ref.get("namespace") == host_namespace and ref.get("name") in refs:
            pods.append({**pod, "podRef": refs[ref["name"]]})
    return {**summary, "pods": pods}


class NodeProxies:
    """One log and stats server per host node, serving one tenant's view of it.

    Args:
        tenant: the tenant (vCluster) name.
        host_namespace: where the tenant's pods are on the host (`vcluster-<tenant>`).
        tenant_pods: the tenant's pods now (the syncer's informer).
        host_logs: the node agent's log lookup, by host namespace and pod name.
        workdir: the proxies' serving certificate goes here.
        host_stats: a host node's `/stats/summary` (node name → document), if any.
        address: where the proxies listen (the host nodes' InternalIP).
        client_ca: serve only the tenant apiserver's kubelet client certificate (its CA).
    """

    def __init__(
        self,
        tenant: str,
        host_namespace: str,
        tenant_pods: Callable[[], list[Obj]],
        host_logs: LogLookup,
        workdir: Path,
        host_stats: Callable[[str], Obj] | None = None,
        address: str = "127.0.0.1",
        client_ca: Path | None = None,
    ) -> None:
        self.tenant = tenant
        self.host_namespace = host_namespace
        ca = pki.write_ca(Path(workdir) / "pki", f"k8s-ai-syncer-{tenant}")
        hosts = list(dict.fromkeys([address, "127.0.0.1"]))
        self._serving = pki.write_serving_cert(ca, Path(workdir) / "serving", hosts)
        self._tenant_pods = tenant_pods
        self._host_logs = host_logs
        self._host_stats = host_stats
        self._address, self._client_ca = address, client_ca
        self.servers: dict[str, LogServer] = {}  # host node → its proxy for the tenant

    def port(self, node: str) -> int:
        """The port of `node`'s proxy (started on first use)."""
        proxy = self.servers.get(node)
        if proxy is None:
            stats = partial(self._tenant_stats, node) if self._host_stats else None
            proxy = LogServer(
                self._tenant_logs,
                self._serving,
                stats=stats,
                address=self._address,
                client_ca=self._client_ca,
            ).start()
            self.servers[node] = proxy
        return proxy.port

    def stop(self) -> None:
        """Stop every proxy."""
        for proxy in list(self.servers.values()):
            proxy.stop()

    def _tenant_stats(self, node: str) -> Obj:
        """The host node's summary with this tenant's pods only, under their tenant names."""
        assert self._host_stats is not None
        summary = self._host_stats(node)
        refs = {}
        for pod in self._tenant_pods():
            meta = pod["metadata"]
            host = translate.host_name(meta["name"], meta["namespace"], self.tenant)
            refs[host] = {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]}
        return tenant_summary(summary, self.host_namespace, refs)

    def _tenant_logs(self, namespace: str, name: str, container: str, previous: bool) -> Any:
        host = translate.host_name(name, namespace, self.tenant)
        return self._host_logs(self.host_namespace, host, container, previous)


__all__ = ["NodeProxies", "tenant_summary"]
