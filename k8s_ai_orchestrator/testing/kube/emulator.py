"""KubeEmulator: a host cluster API plus one vCluster API server per tenant, over real HTTP.

The official `kubernetes` client talks to it exactly as to a real cluster. Pods of every
tenant land on the host's shared nodes, where the kubelet runs their commands as local
processes. Each tenant lists the host's nodes, as a vCluster with our recommended values
(`sync.fromHost.nodes`) does; `sync_nodes=False` turns that off. See
docs/testing-with-the-emulator.md.

Example:
    >>> from kubernetes import client
    >>> with KubeEmulator(nodes=[NodeSpec("node-a", cpu="4", memory="8Gi")],
    ...                   tenants=["team-a"]) as emu:
    ...     core = client.CoreV1Api(emu.tenant("team-a").api_client())
    ...     [ns.metadata.name for ns in core.list_namespace().items][:1]
    ...     [node.metadata.name for node in core.list_node().items]
    ['default']
    ['node-a']
"""

from __future__ import annotations

import base64
import secrets
import shutil
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from .admission import admit_pod, refresh_quota_status
from .api import ObjectApi
from .faults import FaultsMixin
from .jobs import JobController
from .kubelet import Kubelet
from .lifecycle import finish_foreground_deletions, finish_namespace_deletions
from .nodes import NodeSpec
from .nodesync import sync_nodes
from .scheduler import Scheduler
from .server import ApiServer
from .store import ClusterState, Obj

HOST = "host"


def kubeconfig_text(name: str, server_url: str, token: str, ca_pem: bytes | None) -> str:
    """A kubeconfig (YAML text) with one cluster, one token user and one context."""
    cluster: dict[str, Any] = {"server": server_url}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": f"{name}-user", "user": {"token": token}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": name, "user": f"{name}-user", "namespace": "default"},
            }
        ],
        "current-context": name,
    }
    return str(yaml.safe_dump(config, sort_keys=False))


class KubeEmulator(FaultsMixin):
    """An emulated host cluster with vCluster tenants; start() it or use it as a context."""

    def __init__(
        self,
        nodes: Iterable[NodeSpec] | None = None,
        tenants: Iterable[str] = (),
        tls: bool = False,
        workdir: str | Path | None = None,
        bookmark_interval: float = 1.0,
        tick_seconds: float = 0.05,
        sync_nodes: bool = True,
    ) -> None:
        self.node_specs = list(nodes) if nodes is not None else [NodeSpec("node-a")]
        self.tenant_names = list(tenants)
        self.sync_nodes = sync_nodes  # tenants list the host's nodes (vCluster fromHost.nodes)
        self.tls = tls
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="kube-emu-"))
        self.bookmark_interval = bookmark_interval
        self.tick_seconds = tick_seconds
        self.cluster = ClusterState()
        self.servers: dict[str, ApiServer] = {}
        self._controllers: list[JobController] = []
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._loop: threading.Thread | None = None
        self.controller_errors: list[str] = []  # tracebacks from the control loop (a bug)
        host = self.cluster.new_store(HOST)
        self.kubelet = Kubelet(
            self.cluster, host, self.workdir / "pods", self._wake, on_error=self._pod_error
        )

    # lifecycle ---------------------------------------------------------------------------

    def start(self) -> KubeEmulator:
        """Start the API servers, write the kubeconfigs and start the controllers."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> KubeEmulator:
        self.workdir.mkdir(parents=True, exist_ok=True)
        bundle = None
        if self.tls:
            from .tls import make_tls_bundle  # needs `cryptography`, only for TLS

            bundle = make_tls_bundle()
        context = bundle.server_context(self.workdir) if bundle else None
        for name in [HOST, *self.tenant_names]:
            store = self.cluster.stores.get(name) or self.cluster.new_store(name)
            with self.cluster.lock:
                api = ObjectApi(store, admit_pod)
            server = ApiServer(
                name, api, secrets.token_urlsafe(24), self.kubelet, context, self.bookmark_interval
            )
            server.wake = self._wake
            server.start()
            path = self.workdir / f"kubeconfig-{name}.yaml"
            path.write_text(
                kubeconfig_text(
                    name, server.server_url, server.token, bundle.ca_pem if bundle else None
                )
            )
            server.kubeconfig_path = str(path)
            self.servers[name] = server
            self._controllers.append(JobController(api))
        with self.cluster.lock:
            for spec in self.node_specs:
                self.host_store.put("nodes", spec.to_object())
            for tenant in self.tenant_names:
                self._publish_tenant_secret(tenant)
            self._sync_tenant_nodes()
            for store in self.cluster.stores.values():
                store.expire_history()  # versions from before the start are compacted away
        self._loop = threading.Thread(target=self._run, name="kube-emulator", daemon=True)
        self._loop.start()
        return self

    def stop(self) -> None:
        """Stop the servers and the controllers, killing every process the kubelet started."""
        self._stop.set()
        self._wake.set()
        if self._loop is not None:
            self._loop.join(timeout=10)
        for server in self.servers.values():
            server.stop()
        with self.cluster.lock:
            self.kubelet.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> KubeEmulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self) -> None:
        scheduler = Scheduler(self.cluster, self.host_store)
        while not self._stop.is_set():
            self._wake.clear()  # a write or an exit during the pass runs the next one at once
            with self.cluster.lock:
                try:
                    self._reconcile(scheduler)
                except Exception:  # keep the control loop alive; tests assert none happened
                    self.controller_errors.append(traceback.format_exc())
            self._wake.wait(self.tick_seconds)

    def _pod_error(self, error: BaseException) -> None:
        self.controller_errors.append("".join(traceback.format_exception(error)))

    def _reconcile(self, scheduler: Scheduler) -> None:
        # Job controllers before and after: a new Job's pod is created, bound and started in
        # one pass, and a finished pod is counted in the pass that saw it exit.
        for controller in self._controllers:
            controller.tick()
        scheduler.tick()
        self.kubelet.tick()
        for controller in self._controllers:
            controller.tick()
        for store in self.cluster.stores.values():
            refresh_quota_status(store)
            finish_foreground_deletions(store)
            finish_namespace_deletions(store)
        self._sync_tenant_nodes()

    def _sync_tenant_nodes(self) -> None:
        if self.sync_nodes:
            for tenant in self.tenant_names:
                sync_nodes(self.host_store, self.cluster.stores[tenant])

    def _publish_tenant_secret(self, tenant: str) -> None:
        api = self.servers[HOST].api
        namespaces, secrets_rt = api_types("namespaces"), api_types("secrets")
        namespace = self.host_namespace(tenant)
        api.create(namespaces, "", {"metadata": {"name": namespace}}, {})
        config = Path(self.servers[tenant].kubeconfig_path).read_bytes()
        secret = {
            "metadata": {"name": f"vc-{tenant}"},
            "data": {"config": base64.b64encode(config).decode()},
        }
        api.create(secrets_rt, namespace, secret, {})

    # access ------------------------------------------------------------------------------

    @property
    def host(self) -> ApiServer:
        """The host cluster's API server (kubeconfig_path, api_client(), server_url, token)."""
        return self.servers[HOST]

    @property
    def host_store(self) -> Any:
        """The host cluster's object store."""
        return self.cluster.stores[HOST]

    def tenant(self, name: str) -> ApiServer:
        """The API server of vCluster tenant `name`."""
        return self.servers[name]

    def host_namespace(self, tenant: str) -> str:
        """The host namespace holding tenant's `vc-<tenant>` kubeconfig secret."""
        return f"vcluster-{tenant}"

    def server(self, name: str | None) -> ApiServer:
        """The API server named `name` ("host" when None)."""
        return self.servers[name or HOST]

    def request_counts(self, server: str | None = None) -> Counter[tuple[str, str]]:
        """Requests received, keyed by (verb, resource), for one server or all of them."""
        names = [server] if server else list(self.servers)
        total: Counter[tuple[str, str]] = Counter()
        for name in names:
            total.update(self.servers[name].counts())
        return total

    def reset_request_counts(self) -> None:
        """Forget the request counts of every server."""
        for server in self.servers.values():
            server.reset_counts()

    def set_permission(self, server: str, verb: str, resource: str, allowed: bool) -> None:
        """Grant or deny `verb` on `resource` ("jobs", "pods/log") to a server's token."""
        denied = self.servers[server].denied
        if allowed:
            denied.discard((verb, resource))
        else:
            denied.add((verb, resource))

    def wait_for(
        self, predicate: Callable[[], Any], timeout: float = 30, interval: float = 0.05
    ) -> Any:
        """Poll `predicate` until it returns something truthy; TimeoutError otherwise."""
        return wait_until(predicate, timeout, interval)

    def _objects(self, resource: str, server: str, namespace: str | None) -> list[Obj]:
        with self.cluster.lock:
            return list(self.cluster.stores[server].list(resource, namespace))

    def pods(self, tenant: str, namespace: str | None = None) -> list[Obj]:
        """Raw pod objects of a server ("host" or a tenant name), for assertions."""
        return self._objects("pods", tenant, namespace)

    def jobs(self, tenant: str, namespace: str | None = None) -> list[Obj]:
        """Raw Job objects of a server, for assertions."""
        return self._objects("jobs", tenant, namespace)

    def events(self, tenant: str, namespace: str | None = None) -> list[Obj]:
        """Raw Event objects of a server, for assertions."""
        return self._objects("events", tenant, namespace)

    def processes_alive(self) -> int:
        """Container processes (process groups) still running."""
        with self.cluster.lock:
            return self.kubelet.processes_alive()


def wait_until(
    predicate: Callable[[], Any],
    timeout: float,
    interval: float,
    describe: Callable[[], str] | None = None,
) -> Any:
    """Poll `predicate` until it returns something truthy; TimeoutError after `timeout` s,
    saying what `describe` (if given) reads of the state at that moment."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            seen = f"; {describe()}" if describe is not None else ""
            raise TimeoutError(f"condition not met within {timeout}s: {predicate!r}{seen}")
        time.sleep(interval)


def api_types(plural: str) -> Any:
    """The ResourceType serving `plural`."""
    from .resources import RESOURCES

    return next(rt for (_, name), rt in RESOURCES.items() if name == plural)
