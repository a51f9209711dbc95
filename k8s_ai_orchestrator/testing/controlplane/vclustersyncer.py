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
- its mapping store: the syncer keeps its host-virtual name mappings in etcd under the fixed
  prefix `/vcluster/mappings/`, and it dials an external etcd only over `https://` with a client
  certificate, so each syncer gets a TLS etcd of its own (the `etcd` personality of kubeplane).

The tenant's apiserver and controller manager are the plane's: the chart's k8s distro is
configured with both disabled and `experimental.virtualClusterKubeConfig` at the tenant's admin
kubeconfig and the plane's CA (certificates under `/data/pki` are generated only when the CA
lives there, so none are written).

Example:
    >>> with start_control_plane(bin_dir, run_dir, tenants=["team-a"]) as plane:  # doctest: +SKIP
    ...     with start_vcluster_syncer(vc_bin_dir, plane, "team-a", run_dir / "vc") as vc:
    ...         print(vc.host_namespace, vc.ready_after_s)
    vcluster-team-a 9.1
"""

from __future__ import annotations

import contextlib
import copy
import os
import socket
import socketserver
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from . import pki
from .cluster import KUBELET_CLIENT, ControlPlane
from .process import Component, ControlPlaneError, free_port

Obj = dict[str, Any]

LOOPBACK = "127.0.0.1"
NODE_SUFFIX = ".nodes.vcluster.com"  # a tenant node's kubelet hostname: <node>.nodes.vcluster.com
KUBELET_PORT = 10250  # the port vCluster writes into a tenant node's daemonEndpoints
SERVICE_CIDR = "10.96.0.0/16"  # the plane's --service-cluster-ip-range (flags.apiserver_args)


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> Obj:
    """`base` with `override` merged in, as Helm merges values: maps merge key by key, any
    other value (lists included) replaces the base's. Neither argument is changed.

    >>> deep_merge({"a": {"b": 1, "c": [1]}, "d": 1}, {"a": {"c": [2], "e": 3}})
    {'a': {'b': 1, 'c': [2], 'e': 3}, 'd': 1}
    >>> deep_merge({"a": {"b": 1}}, {"a": None})
    {'a': None}
    """
    merged: Obj = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@dataclass(frozen=True)
class SyncerFiles:
    """The files the syncer's config names."""

    tenant_kubeconfig: Path  # the tenant apiserver's admin kubeconfig
    ca: pki.KeyPair  # the plane's CA: server, client and request-header CA of the tenant
    etcd_endpoint: str  # host:port of the syncer's TLS etcd
    etcd_ca: Path
    etcd_client: pki.KeyPair


def syncer_overrides(files: SyncerFiles, proxy_port: int) -> Obj:
    """What our plane changes in the chart's values.

    The tenant's apiserver and controller manager are the plane's (distro k8s with both
    disabled, the tenant's kubeconfig), the mapping store is the given TLS etcd, CoreDNS, the
    hosts-rewriting init container (an image pull), the resource quota and limit range, and
    telemetry are off, no owner references (the Service is no pod's owner here), host nodes are
    all synced, tenant nodes name their kubelet by hostname only (no per-node Service IP), the
    proxy listens on loopback, and the service CIDR is given (else the syncer probes the host's
    by creating Services).

    >>> ca = pki.KeyPair(Path("/p/ca.crt"), Path("/p/ca.key"))
    >>> files = SyncerFiles(Path("/t/admin.kubeconfig"), ca, "127.0.0.1:2379", ca.cert,
    ...                     pki.KeyPair(Path("/e/client.crt"), Path("/e/client.key")))
    >>> o = syncer_overrides(files, 8443)
    >>> o["controlPlane"]["distro"]["k8s"]["apiServer"], o["controlPlane"]["proxy"]
    ({'enabled': False}, {'bindAddress': '127.0.0.1', 'port': 8443})
    >>> o["controlPlane"]["backingStore"]["etcd"]["external"]["endpoint"]
    '127.0.0.1:2379'
    >>> o["experimental"]["virtualClusterKubeConfig"]["kubeConfig"]
    '/t/admin.kubeconfig'
    """
    ca_cert = str(files.ca.cert)
    return {
        "serviceCIDR": SERVICE_CIDR,
        "sync": {
            "toHost": {"pods": {"rewriteHosts": {"enabled": False}}},
            "fromHost": {"nodes": {"enabled": True, "selector": {"all": True}}},
        },
        "controlPlane": {
            "distro": {
                "k8s": {
                    "enabled": True,
                    "apiServer": {"enabled": False},
                    "controllerManager": {"enabled": False},
                    "scheduler": {"enabled": False},
                }
            },
            "backingStore": {
                "etcd": {
                    "external": {
                        "enabled": True,
                        "endpoint": files.etcd_endpoint,
                        "tls": {
                            "caFile": str(files.etcd_ca),
                            "certFile": str(files.etcd_client.cert),
                            "keyFile": str(files.etcd_client.key),
                        },
                    }
                }
            },
            "coredns": {"enabled": False},
            "proxy": {"bindAddress": LOOPBACK, "port": proxy_port},
        },
        # A tenant node's InternalIP would be the ClusterIP of a per-node host Service, which
        # nothing routes here: its kubelet is named by hostname only (<node>.nodes.vcluster.com).
        "networking": {"advanced": {"proxyKubelets": {"byHostname": True, "byIP": False}}},
        "policies": {"resourceQuota": {"enabled": False}, "limitRange": {"enabled": False}},
        "experimental": {
            "syncSettings": {"setOwner": False},
            "virtualClusterKubeConfig": {
                "kubeConfig": str(files.tenant_kubeconfig),
                "serverCACert": ca_cert,
                "serverCAKey": str(files.ca.key),
                "clientCACert": ca_cert,
                "requestHeaderCACert": ca_cert,
            },
        },
        "telemetry": {"enabled": False},
    }


def host_namespace(tenant: str) -> str:
    """The host namespace of a tenant's pods, as the chart installs it.

    >>> host_namespace("team-a")
    'vcluster-team-a'
    """
    return f"vcluster-{tenant}"


def host_objects(tenant: str) -> list[Obj]:
    """The chart's host objects the syncer reads, in creation order.

    >>> [(o["kind"], o["metadata"]["name"]) for o in host_objects("team-a")]
    ... # doctest: +NORMALIZE_WHITESPACE
    [('Namespace', 'vcluster-team-a'), ('Service', 'team-a'), ('Secret', 'vc-config-team-a'),
     ('ServiceAccount', 'vc-workload-team-a')]
    """
    namespace = host_namespace(tenant)
    labels = {"app": "vcluster", "release": tenant}
    meta = {"namespace": namespace, "labels": labels}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": tenant, **meta},
            "spec": {
                "type": "ClusterIP",
                "ports": [
                    {"name": "https", "port": 443, "targetPort": 8443, "protocol": "TCP"},
                    {"name": "kubelet", "port": 10250, "targetPort": 8443, "protocol": "TCP"},
                ],
                "selector": {"app": "vcluster", "release": tenant},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"vc-config-{tenant}", **meta},
            "type": "Opaque",
            "data": {},
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": f"vc-workload-{tenant}", **meta},
        },
    ]


# The tenant apiserver's kubelet client (cluster.KUBELET_CLIENT) may read every kubelet path, as
# kubeadm binds it; the syncer's kubelet proxy authorizes each path against the tenant and
# otherwise answers `forbidden: User "kube-apiserver-kubelet-client" cannot get path
# "/containerLogs/..."`.
KUBELET_API_ADMIN: Obj = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "vcluster-kubelet-api-admin"},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:kubelet-api-admin",
    },
    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": KUBELET_CLIENT}],
}

KUBE_DNS: Obj = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "kube-dns", "namespace": "kube-system", "labels": {"k8s-app": "kube-dns"}},
    "spec": {
        "ports": [
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 1053},
            {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 1053},
        ],
        "selector": {"k8s-app": "vcluster-kube-dns"},
    },
}


def tls_etcd_args(
    directory: Path, client_port: int, peer_port: int, serving: pki.KeyPair, ca: Path
) -> list[str]:
    """A single-member etcd serving clients over TLS with client certificates.

    >>> kp = pki.KeyPair(Path("/e/tls.crt"), Path("/e/tls.key"))
    >>> args = tls_etcd_args(Path("/e"), 1, 2, kp, Path("/ca.crt"))
    >>> args[2:4]
    ['--listen-client-urls=https://127.0.0.1:1', '--advertise-client-urls=https://127.0.0.1:1']
    >>> "--client-cert-auth" in args
    True
    """
    client_url = f"https://{LOOPBACK}:{client_port}"
    peer_url = f"http://{LOOPBACK}:{peer_port}"
    return [
        "--name=vcluster-store",
        f"--data-dir={directory / 'data'}",
        f"--listen-client-urls={client_url}",
        f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=vcluster-store={peer_url}",
        f"--cert-file={serving.cert}",
        f"--key-file={serving.key}",
        f"--trusted-ca-file={ca}",
        "--client-cert-auth",
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]


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


def tunnel_target(request_line: str, proxy_port: int) -> tuple[str, int] | None:
    """Where a `CONNECT` from the tenant apiserver goes: a tenant node's kubelet
    (`<node>.nodes.vcluster.com:10250`) is the syncer's proxy on loopback (which finds the node
    by the Host header and forwards to the host's `nodes/<node>/proxy`); anything else, None.

    >>> tunnel_target("CONNECT big-1.nodes.vcluster.com:10250 HTTP/1.1", 8443)
    ('127.0.0.1', 8443)
    >>> tunnel_target("CONNECT 10.96.0.1:443 HTTP/1.1", 8443) is None
    True
    """
    parts = request_line.split()
    if len(parts) != 3 or parts[0] != "CONNECT":
        return None
    host, _, port = parts[1].rpartition(":")
    if not host.endswith(NODE_SUFFIX) or port != str(KUBELET_PORT):
        return None
    return (LOOPBACK, proxy_port)


class _TunnelServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    proxy_port = 0
    requests_seen: list[str]


class _TunnelHandler(socketserver.StreamRequestHandler):
    server: _TunnelServer

    def handle(self) -> None:
        line = self.rfile.readline(8192).decode("latin-1").strip()
        while self.rfile.readline(8192) not in (b"\r\n", b"\n", b""):
            pass  # the request's headers
        self.server.requests_seen.append(line)
        target = tunnel_target(line, self.server.proxy_port)
        if target is None:
            self.wfile.write(b"HTTP/1.1 403 Forbidden\r\n\r\n")
            return
        try:
            upstream = socket.create_connection(target, timeout=10)
        except OSError:
            self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\n\r\n")
            return
        upstream.settimeout(None)
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()
        back = threading.Thread(target=_pipe, args=(upstream, self.connection), daemon=True)
        back.start()
        _pipe(self.connection, upstream)
        back.join()
        upstream.close()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` ends, then end `sink`'s writing side."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class KubeletTunnel:
    """The HTTP CONNECT proxy a `kubelet_egress` tenant apiserver sends its kubelet traffic to
    (`ApiServer.kubelet_egress_socket`): tenant node hostnames go to the syncer's proxy port, any
    other target is refused (403), so the apiserver never dials outside loopback."""

    def __init__(self, socket_path: Path, proxy_port: int) -> None:
        self.socket_path = socket_path
        self.proxy_port = proxy_port
        self._server: _TunnelServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def requests_seen(self) -> list[str]:
        """The request lines received, in order."""
        return self._server.requests_seen if self._server else []

    def start(self) -> KubeletTunnel:
        """Listen on the socket (a stale one is replaced) and serve in a thread."""
        self.socket_path.unlink(missing_ok=True)
        server = _TunnelServer(str(self.socket_path), _TunnelHandler)
        server.proxy_port = self.proxy_port
        server.requests_seen = []
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and remove the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.socket_path.unlink(missing_ok=True)


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
        self.ready_after_s: dict[str, float] = {}

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> VClusterSyncer:
        """Create the host and tenant objects, start the etcd and the syncer, and wait until
        the tenant lists the host's nodes (the node syncer ran).

        Raises:
            ControlPlaneError: a process exited or did not get ready; all is stopped first.
        """
        try:
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
        egress_socket = self.plane.tenants[self.tenant].kubelet_egress_socket
        if egress_socket is not None:
            self.tunnel = KubeletTunnel(egress_socket, proxy_port).start()
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
