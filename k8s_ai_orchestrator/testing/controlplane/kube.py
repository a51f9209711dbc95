"""The real control plane with nodes and tenants, seen the way tests see the emulator.

`RealKube` starts the node agent (host nodes that run pods as local processes) and one
vCluster-style syncer per tenant on a running `ControlPlane` (but for the tenants named in
`synced_elsewhere`, left to the real vCluster syncer: `vclustersyncer`), and offers the
emulator's test surface (`tenant(name).kubeconfig_path`, `api_client()`, `pods`, `jobs`, `events`,
`evict_pod`, `preempt_pod`, `wait_for`, `processes_alive`), so the same test can run on both.
The agent also adopts the Nodes Karpenter launches on the host (`karpenter.py`), so pods run
on them too.

`fresh()` returns a view that hides every object that exists now: a session-wide plane then
looks empty to each test.

Example:
    >>> nodes = [NodeSpec("big-1", cpu="96", memory="768Gi")]
    >>> with RealKube(plane, nodes, work) as kube:  # doctest: +SKIP
    ...     view = kube.fresh()
    ...     view.jobs("team-a", "default")
    []
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from kubernetes import client, config

from ..kube.emulator import wait_until
from ..kube.nodes import NodeSpec
from .agent import NodeAgent
from .agent.dra import DraGpus
from .cluster import ApiServer, ControlPlane
from .karpenterpools import NODEPOOL_LABEL
from .syncer import TenantSyncer, translate

Obj = dict[str, Any]


@dataclass(frozen=True)
class ServerView:
    """One apiserver as the emulator's tests address it."""

    server: ApiServer

    @property
    def kubeconfig_path(self) -> str:
        """The admin kubeconfig."""
        return str(self.server.kubeconfig)

    @property
    def token(self) -> str:
        """The admin bearer token."""
        return self.server.admin_token

    def api_client(self) -> client.ApiClient:
        """A new admin client."""
        return config.new_client_from_config(config_file=self.kubeconfig_path)


@dataclass
class RealKube:
    """See the module docstring."""

    plane: ControlPlane
    nodes: Sequence[NodeSpec]
    workdir: Path
    hidden: frozenset[str] = frozenset()  # uids of objects this view does not show
    synced_elsewhere: frozenset[str] = frozenset()  # tenants whose syncer is not started here
    agent: NodeAgent | None = None
    syncers: dict[str, TenantSyncer] = field(default_factory=dict)
    # where clients reach a tenant synced elsewhere, when not its apiserver: the real vCluster
    # syncer's front proxy (`VClusterSyncer.front`), as a user of a real vCluster reaches it
    fronts: dict[str, ApiServer] = field(default_factory=dict)
    _clients: dict[str, client.ApiClient] = field(default_factory=dict)
    dra_gpus: Sequence[DraGpus] = ()  # fake GPUs the node agent publishes as DRA devices
    node_boot_s: float = 0.0  # how long a Node Karpenter launches takes to join (agent)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> RealKube:
        """Start the node agent, then a syncer per tenant not `synced_elsewhere`."""
        assert self.plane.host is not None, "start the control plane first"
        self.agent = NodeAgent(
            self.plane.host.kubeconfig,
            self.nodes,
            self.workdir / "agent",
            client_ca=self.plane.host.ca_file,
            dra_gpus=self.dra_gpus,
            adopt_selector=NODEPOOL_LABEL,  # the Nodes Karpenter launches, when it runs here
            adopt_after_s=self.node_boot_s,
        )
        self.agent.start()
        for name, server in self.plane.tenants.items():
            if name in self.synced_elsewhere:
                continue
            syncer = TenantSyncer(
                self.host.api_client(),
                ServerView(server).api_client(),
                name,
                server.kubeconfig,
                self.agent.log_lookup,
                self.workdir / f"syncer-{name}",
                host_stats=self.agent.kubelet.summary,
                address=self.agent.address,
                client_ca=self.plane.host.ca_file,
            )
            self.syncers[name] = syncer.start()
        return self

    def stop(self) -> None:
        """Stop the syncers and the agent (its container processes are killed)."""
        for syncer in self.syncers.values():
            syncer.stop()
        if self.agent is not None:
            self.agent.stop()

    def __enter__(self) -> RealKube:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def fresh(self) -> RealKube:
        """A view of this cluster that hides every pod, Job and event that exists now."""
        uids = {
            o["metadata"]["uid"]
            for server in ("host", *self.plane.tenants)
            for kind in ("pods", "jobs", "events")
            for o in self._objects(kind, server, None)
        }
        return RealKube(
            self.plane,
            self.nodes,
            self.workdir,
            frozenset(uids),
            self.synced_elsewhere,
            self.agent,
            self.syncers,
            fronts=self.fronts,
        )

    # -- the emulator's test surface -----------------------------------------------------------

    @property
    def host(self) -> ServerView:
        """The host apiserver."""
        assert self.plane.host is not None
        return ServerView(self.plane.host)

    def tenant(self, name: str) -> ServerView:
        """A tenant's apiserver."""
        return ServerView(self.fronts.get(name) or self.plane.tenants[name])

    def adopted(self) -> list[str]:
        """The host Nodes the node agent adopted and still serves (Karpenter's)."""
        return sorted(self.agent.adopted) if self.agent is not None else []

    def host_namespace(self, tenant: str) -> str:
        """The host namespace of a tenant (its `vc-<tenant>` secret and its pods)."""
        return f"vcluster-{tenant}"

    @property
    def api_server_version(self) -> str:
        """What the host apiserver's /version reports."""
        return str(client.VersionApi(self._client("host")).get_code().git_version)

    def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.1
    ) -> Any:
        """Poll `predicate` until it returns something truthy; TimeoutError otherwise, saying
        what the node agent and our syncers were doing (`describe`)."""
        return wait_until(predicate, timeout, interval, self.describe)

    def describe(self) -> str:
        """The node agent's and our syncers' loops and what they hold."""
        parts = [self.agent.describe()] if self.agent is not None else []
        return "\n".join(parts + [s.describe() for s in self.syncers.values()])

    def pods(self, server: str, namespace: str | None = None) -> list[Obj]:
        """Raw pods of "host" or a tenant, without the hidden ones."""
        return self._objects("pods", server, namespace)

    def jobs(self, server: str, namespace: str | None = None) -> list[Obj]:
        """Raw Jobs of "host" or a tenant, without the hidden ones."""
        return self._objects("jobs", server, namespace)

    def events(self, server: str, namespace: str | None = None) -> list[Obj]:
        """Raw events of "host" or a tenant, without the hidden ones."""
        return self._objects("events", server, namespace)

    def evict_pod(self, server: str, namespace: str, name: str) -> None:
        """Evict a pod through the Eviction API of its apiserver."""
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        client.CoreV1Api(self._client(server)).create_namespaced_pod_eviction(name, namespace, body)

    def preempt_pod(
        self, server: str, namespace: str, name: str, grace_s: int | None = None
    ) -> None:
        """Preempt a pod as kube-scheduler's preemption does, without a preemptor to place.

        On the host pod (a tenant pod's is found by vCluster's naming): the `DisruptionTarget`
        condition with reason `PreemptionByScheduler`, a `Preempted` event, then a delete with
        the pod's own grace period, or `grace_s` (0: the host pod is gone at once, before any
        kubelet wrote its end). The tenant sees it through the syncer. (The scheduler's own
        preemption is tested with a real preemptor in `tests/kubernetes`.)
        """
        if server == "host":
            host_namespace, host_pod = namespace, name
        else:
            host_namespace = self.host_namespace(server)
            host_pod = translate.host_name(name, namespace, server)
        core = client.CoreV1Api(self._client("host"))
        pod = core.read_namespaced_pod(host_pod, host_namespace)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "default-scheduler: preempting to accommodate a higher priority pod",
            "lastTransitionTime": now,
        }
        core.patch_namespaced_pod_status(
            host_pod,
            host_namespace,
            {"status": {"conditions": [condition]}},
            _content_type="application/strategic-merge-patch+json",
        )
        node = pod.spec.node_name or "unknown"
        event = {
            "metadata": {"generateName": f"{host_pod}.", "namespace": host_namespace},
            "involvedObject": {
                "kind": "Pod",
                "name": host_pod,
                "namespace": host_namespace,
                "uid": pod.metadata.uid,
                "apiVersion": "v1",
            },
            "reason": "Preempted",
            "message": f"Preempted by pod test-preemptor on node {node}",
            "type": "Normal",
            "source": {"component": "default-scheduler"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        core.create_namespaced_event(host_namespace, event)
        core.delete_namespaced_pod(host_pod, host_namespace, grace_period_seconds=grace_s)

    def processes_alive(self) -> int:
        """Container process groups still running on the agent's nodes."""
        return self.agent.processes_alive() if self.agent is not None else 0

    # -- internals -------------------------------------------------------------------------------

    def _client(self, server: str) -> client.ApiClient:
        if server not in self._clients:
            view = self.host if server == "host" else self.tenant(server)
            self._clients[server] = view.api_client()
        return self._clients[server]

    def _objects(self, kind: str, server: str, namespace: str | None) -> list[Obj]:
        api_client = self._client(server)
        if kind == "jobs":
            api: Any = client.BatchV1Api(api_client)
            listed = (
                api.list_namespaced_job(namespace)
                if namespace
                else api.list_job_for_all_namespaces()
            )
        else:
            core = client.CoreV1Api(api_client)
            plural = "pod" if kind == "pods" else "event"
            listed = (
                getattr(core, f"list_namespaced_{plural}")(namespace)
                if namespace
                else getattr(core, f"list_{plural}_for_all_namespaces")()
            )
        items = api_client.sanitize_for_serialization(listed.items)
        return [o for o in items if o["metadata"]["uid"] not in self.hidden]
