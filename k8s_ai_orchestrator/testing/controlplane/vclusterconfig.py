"""The real vCluster syncer's config and the objects it expects, for one tenant of the test
control plane (pure functions; `vclustersyncer` starts it). See `vclustersyncer` for why each
part is there.

Example:
    >>> values = {"telemetry": {"enabled": True}, "sync": {"toHost": {"pods": {"enabled": True}}}}
    >>> deep_merge(values, {"telemetry": {"enabled": False}})["telemetry"]
    {'enabled': False}
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import pki
from .cluster import KUBELET_CLIENT

Obj = dict[str, Any]

LOOPBACK = "127.0.0.1"
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
