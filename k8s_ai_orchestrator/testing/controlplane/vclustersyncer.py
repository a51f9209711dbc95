"""The real vCluster v0.34 syncer (`vcluster start`, built by `scripts/build-vcluster.sh`) as a
plain process for one tenant of the test control plane, in place of our Python syncer.

`vcluster start` expects to run in the pod of its chart's StatefulSet. This module plays the
parts of that install a process outside the cluster lacks:

- its config: the chart's `values.yaml` deep-merged with `syncer_overrides` (the syncer parses
  the file strictly and merges no defaults of its own);
- the pod's environment: `POD_NAME` (non-empty, else `start` takes the Pro-only standalone
  path), `VCLUSTER_NAME`, `NAMESPACE` (else it reads the service account's namespace file) and
  `KUBECONFIG` at the host's admin kubeconfig (else it wants the in-cluster config);
- the host objects of the chart (`host_objects`): namespace `vcluster-<tenant>`, the Service
  `<tenant>` (read before anything starts), the config Secret `vc-config-<tenant>` (its
  annotations record the backing store; the syncer exits without it) and the workload
  ServiceAccount `vc-workload-<tenant>`;
- the tenant's `kube-system/kube-dns` Service (CoreDNS is off, and the pod syncer waits for it),
  and the kubelet-api-admin binding of the tenant apiserver's kubelet client;
- for `pods/log` and stats, the tenant's kubelet route: started with the tenant in
  `kubelet_egress`, the plane's tenant apiserver sends kubelet traffic to an HTTP CONNECT proxy
  (`KubeletTunnel`) that takes `<node>.nodes.vcluster.com:10250` to the syncer's proxy port;
  the syncer names the node by the Host header and forwards to the host's `nodes/<node>/proxy`;
- the tenant's users: as those of a real vCluster, they reach it through the syncer's front
  proxy (`front`: in a real install, what the vCluster Service exposes), which serves
  `nodes/<node>/proxy` (stats) from the host itself and passes the rest to the tenant
  apiserver (the tenant apiserver's own node proxy would send the caller's Host header on to
  the syncer, which finds no node by it);
- its mapping store: the syncer keeps its host-virtual name mappings in etcd under the fixed
  prefix `/vcluster/mappings/`, and it dials an external etcd only over `https://` with a client
  certificate, so each syncer gets a TLS etcd of its own (the `etcd` personality of kubeplane).

The tenant's apiserver and controller manager are the plane's: the chart's k8s distro is
configured with both disabled and `experimental.virtualClusterKubeConfig` at the tenant's admin
kubeconfig and the plane's CA (certificates under `/data/pki` are generated only when the CA
lives there, so none are written).

Example:
    >>> with start_control_plane(  # doctest: +SKIP
    ...     bin_dir, run_dir, tenants=["team-a"], kubelet_egress=["team-a"]
    ... ) as plane:
    ...     with start_vcluster_syncer(vc_bin_dir, plane, "team-a", run_dir / "vc") as vc:
    ...         print(vc.host_namespace, vc.ready_after_s)
    vcluster-team-a {'nodes synced': 2.1}
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from . import pki
from .cluster import ApiServer, ControlPlane, write_kubeconfig
from .kubelettunnel import KubeletTunnel
from .process import Component, ControlPlaneError, free_port, machine_lock
from .vclusterconfig import (
    KUBE_DNS,
    KUBELET_API_ADMIN,
    LOOPBACK,
    Obj,
    SyncerFiles,
    deep_merge,
    host_namespace,
    host_objects,
    syncer_overrides,
    tls_etcd_args,
)

# vCluster's plugin server listens here whatever the config (`LegacyOptions`): one syncer per
# machine (per network namespace) at a time; a second exits with `start legacy plugins: failed
# to listen: listen tcp 127.0.0.1:10099: bind: address already in use`.
PLUGIN_ADDRESS = ("127.0.0.1", 10099)
# Held (flock) by the syncer that owns the plugin port, so two test runs on one machine never
# race for it: the second is told at once, before it creates anything.
PLUGIN_LOCK = Path(tempfile.gettempdir()) / "k8s-ai-orchestrator-vcluster-plugin.lock"


def _take_plugin_lock() -> Any:
    return machine_lock(
        PLUGIN_LOCK,
        f"another vCluster syncer runs on this machine: vCluster's plugin server always listens "
        f"on {PLUGIN_ADDRESS[0]}:{PLUGIN_ADDRESS[1]}, so only one syncer can run at a time; stop "
        "the other first",
    )


def _require_free_plugin_port() -> None:
    with socket.socket() as probe:
        try:
            probe.bind(PLUGIN_ADDRESS)
        except OSError as error:
            raise ControlPlaneError(
                f"{PLUGIN_ADDRESS[0]}:{PLUGIN_ADDRESS[1]} is taken ({error}): another vCluster "
                "syncer runs on this machine, and vCluster's plugin server always listens there"
            ) from error


def _create(api: client.ApiClient, obj: Obj) -> None:
    """Create `obj` (a Namespace, Service, Secret, ServiceAccount or ClusterRoleBinding); an
    existing one is kept."""
    core = client.CoreV1Api(api)
    namespace = obj["metadata"].get("namespace")
    rbac = client.RbacAuthorizationV1Api(api)
    create = {
        "ClusterRoleBinding": lambda: rbac.create_cluster_role_binding(obj),
        "Namespace": lambda: core.create_namespace(obj),
        "Service": lambda: core.create_namespaced_service(namespace, obj),
        "Secret": lambda: core.create_namespaced_secret(namespace, obj),
        "ServiceAccount": lambda: core.create_namespaced_service_account(namespace, obj),
    }[obj["kind"]]
    try:
        create()
    except ApiException as error:
        if error.status != 409:
            raise


class VClusterSyncer:
    """`vcluster start` for one tenant of a running `ControlPlane`; see the module docstring.

    Args:
        bin_dir: the build directory (`vcluster` and the chart's `values.yaml`).
        plane: a started control plane with `tenant` among its tenants.
        tenant: the tenant whose pods go to host namespace `vcluster-<tenant>`.
        run_dir: the config, the etcd's PKI and data, and the logs go here.
        overrides: more values merged over `syncer_overrides`.
        startup_timeout_s: from the syncer's start until it lists the host's nodes in the tenant.
    """

    def __init__(
        self,
        bin_dir: Path,
        plane: ControlPlane,
        tenant: str,
        run_dir: Path,
        *,
        overrides: Mapping[str, Any] | None = None,
        startup_timeout_s: float = 180.0,
    ) -> None:
        if plane.host is None or tenant not in plane.tenants:
            raise ControlPlaneError(f"the plane is not started or has no tenant {tenant!r}")
        self.binary = Path(bin_dir) / "vcluster"
        self.chart_values = Path(bin_dir) / "values.yaml"
        self.plane = plane
        self.tenant = tenant
        self.run_dir = Path(run_dir)
        self.overrides = dict(overrides or {})
        self.startup_timeout_s = startup_timeout_s
        self.host_namespace = host_namespace(tenant)
        self.config_path = self.run_dir / "config.yaml"
        self.etcd: Component | None = None
        self.syncer: Component | None = None
        self.tunnel: KubeletTunnel | None = None
        # the tenant as its users reach it: the syncer's front proxy (in a real install, behind
        # the vCluster Service), which serves nodes/<node>/proxy from the host and passes the
        # rest to the tenant apiserver
        self.front: ApiServer | None = None
        self.ready_after_s: dict[str, float] = {}
        self._lock: Any = None

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> VClusterSyncer:
        """Create the host and tenant objects, start the etcd and the syncer, and wait until
        the tenant lists the host's nodes (the node syncer ran).

        Raises:
            ControlPlaneError: a process exited or did not get ready, or another syncer holds
                the plugin port; all is stopped first.
        """
        if self.syncer is not None:
            return self  # already started (e.g. start_vcluster_syncer() used in a `with`)
        self._lock = _take_plugin_lock()
        try:
            _require_free_plugin_port()
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the kubelet tunnel, the syncer, then its etcd (host pods it made stay)."""
        if self.tunnel is not None:
            self.tunnel.stop()
        for component in (self.syncer, self.etcd):
            if component is not None:
                component.stop()
        self.tunnel, self.syncer, self.etcd, self.front = None, None, None, None
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None

    def __enter__(self) -> VClusterSyncer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- startup -------------------------------------------------------------------------------

    def _start(self) -> None:
        started = time.monotonic()
        assert self.plane.host is not None
        self.run_dir.mkdir(parents=True, exist_ok=True)
        host_api = config.new_client_from_config(str(self.plane.host.kubeconfig))
        tenant_api = config.new_client_from_config(str(self.plane.tenants[self.tenant].kubeconfig))
        for obj in host_objects(self.tenant):
            _create(host_api, obj)
        _create(tenant_api, KUBE_DNS)
        _create(tenant_api, KUBELET_API_ADMIN)
        files = self._start_etcd()
        values = yaml.safe_load(self.chart_values.read_text())
        proxy_port = free_port()
        merged = deep_merge(deep_merge(values, syncer_overrides(files, proxy_port)), self.overrides)
        server = self.plane.tenants[self.tenant]
        if server.kubelet_egress_socket is not None:
            self.tunnel = KubeletTunnel(server.kubelet_egress_socket, proxy_port).start()
        self.config_path.write_text(yaml.safe_dump(merged, sort_keys=False))
        env = {
            **os.environ,
            "POD_NAME": f"{self.tenant}-0",
            "VCLUSTER_NAME": self.tenant,
            "NAMESPACE": self.host_namespace,
            "KUBECONFIG": str(self.plane.host.kubeconfig),
        }
        self.syncer = Component(
            f"vcluster-{self.tenant}",
            [str(self.binary), "start", f"--config={self.config_path}"],
            self.run_dir / "logs" / "vcluster.log",
            env=env,
            cwd=self.run_dir,
        ).start()
        core = client.CoreV1Api(tenant_api)

        def nodes_synced() -> str | None:
            try:
                if core.list_node().items:
                    return None
            except ApiException as error:
                return f"listing tenant nodes: {error.status}"
            return "no node in the tenant yet"

        self.syncer.wait_ready(nodes_synced, self.startup_timeout_s, "nodes synced")
        url = f"https://{LOOPBACK}:{proxy_port}"
        front = write_kubeconfig(
            self.run_dir / "front.kubeconfig", url, server.ca_file, "admin", server.admin_token
        )
        self.front = replace(server, url=url, kubeconfig=front)
        self.ready_after_s["nodes synced"] = time.monotonic() - started

    def _start_etcd(self) -> SyncerFiles:
        pki_dir = self.run_dir / "etcd-pki"
        serving = pki.write_serving_cert(
            self.plane.ca, pki_dir / "serving", [LOOPBACK, "localhost"]
        )
        etcd_client = pki.write_client_cert(self.plane.ca, pki_dir / "client", "vcluster")
        port = free_port()
        args = tls_etcd_args(self.run_dir / "etcd", port, free_port(), serving, self.plane.ca.cert)
        self.etcd = Component(
            f"vcluster-etcd-{self.tenant}",
            [str(self.plane.binary), "etcd", *args],
            self.run_dir / "logs" / "etcd.log",
        ).start()
        tenant = self.plane.tenants[self.tenant]
        return SyncerFiles(
            tenant_kubeconfig=tenant.kubeconfig,
            ca=self.plane.ca,
            etcd_endpoint=f"{LOOPBACK}:{port}",
            etcd_ca=self.plane.ca.cert,
            etcd_client=etcd_client,
        )


def start_vcluster_syncer(
    bin_dir: Path,
    plane: ControlPlane,
    tenant: str,
    run_dir: Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    startup_timeout_s: float = 180.0,
) -> VClusterSyncer:
    """Start a `VClusterSyncer` (arguments as in its constructor) and return it, ready."""
    syncer = VClusterSyncer(
        bin_dir, plane, tenant, run_dir, overrides=overrides, startup_timeout_s=startup_timeout_s
    )
    return syncer.start()
