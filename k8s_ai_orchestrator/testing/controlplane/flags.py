"""Command lines of the control-plane components (pure functions, no side effects).

The flag sets follow what kwok, envtest and vCluster pass to the same binaries; every flag here
was checked against the v1.37.2 build of `tests/kubeplane`.

Example:
    >>> from pathlib import Path
    >>> etcd_args(EtcdPorts(client=2379, peer=2380), Path("/dev/shm/etcd"))[:2]
    ['--name=kubeplane', '--data-dir=/dev/shm/etcd']
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

LOOPBACK = "127.0.0.1"
ADMISSION_PLUGINS = ("NodeRestriction", "ResourceQuota", "LimitRanger", "Priority", "PodSecurity")
HEALTH_PATHS = "/healthz,/readyz,/livez,/metrics"

# The host runs the node-lifecycle and taint-eviction controllers (nodes go NotReady and pods
# are evicted as on a real cluster); it has no IPAM, no volume plugins and no TTL annotations.
HOST_CONTROLLERS = (
    "*",
    "-node-ipam-controller",
    "-persistentvolume-binder-controller",
    "-persistentvolume-attach-detach-controller",
    "-persistentvolume-expander-controller",
    "-ttl-controller",
)
# vCluster's virtual controller manager: the host owns the nodes, so no node lifecycle either;
# and, as our recommended vCluster values set (helm/vcluster-values.yaml), no taint eviction:
# the host's evicts from the host's nodes, the tenant's would act on lagging copies of them.
TENANT_CONTROLLERS = (*HOST_CONTROLLERS, "-node-lifecycle-controller", "-taint-eviction-controller")


@dataclass(frozen=True)
class EtcdPorts:
    """The two loopback ports of the single etcd member."""

    client: int
    peer: int

    @property
    def client_url(self) -> str:
        """The URL apiservers pass as `--etcd-servers`."""
        return f"http://{LOOPBACK}:{self.client}"


@dataclass(frozen=True)
class ApiServerFiles:
    """The files one apiserver reads: serving pair, client CA, tokens and its SA key pair."""

    tls_cert: Path
    tls_key: Path
    client_ca: Path
    token_file: Path
    service_account_key: Path  # private: signs tokens (and the KCM signs legacy ones)
    service_account_public_key: Path  # verifies tokens
    kubelet_client: tuple[Path, Path] | None = None  # cert, key: how it proves itself to nodes
    # An EgressSelectorConfiguration (`kubelet_egress_config`): kubelet traffic goes through an
    # HTTP CONNECT proxy, and a node's Hostname address is tried first (vCluster's syncer names
    # each tenant node's kubelet `<node>.nodes.vcluster.com`, which only that proxy resolves).
    egress_selector_config: Path | None = None


@dataclass(frozen=True)
class Gates:
    """Feature gates and `--runtime-config` entries applied to every component that takes them.

    Example:
        >>> Gates({"GenericWorkload": True}).feature_gate_args()
        ['--feature-gates=GenericWorkload=true']
    """

    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    runtime_config: Sequence[str] = ()  # apiserver only, e.g. "scheduling.k8s.io/v1beta1=true"

    def feature_gate_args(self) -> list[str]:
        """`--feature-gates=...` or nothing when no gate is set."""
        if not self.feature_gates:
            return []
        pairs = ",".join(f"{k}={str(v).lower()}" for k, v in sorted(self.feature_gates.items()))
        return [f"--feature-gates={pairs}"]


def etcd_args(ports: EtcdPorts, data_dir: Path, quota_bytes: int = 2 * 1024**3) -> list[str]:
    """A single-member, test-only etcd: no fsync, compacted hourly, loopback only."""
    peer_url = f"http://{LOOPBACK}:{ports.peer}"
    return [
        "--name=kubeplane",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={ports.client_url}",
        f"--advertise-client-urls={ports.client_url}",
        f"--listen-peer-urls={peer_url}",
        f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=kubeplane={peer_url}",
        "--unsafe-no-fsync",
        f"--quota-backend-bytes={quota_bytes}",
        "--auto-compaction-mode=periodic",
        "--auto-compaction-retention=1h",
        "--log-level=info",
    ]


def apiserver_args(
    port: int, etcd: EtcdPorts, etcd_prefix: str, files: ApiServerFiles, gates: Gates
) -> list[str]:
    """A kube-apiserver on loopback with token auth, Node+RBAC and the quota admission chain."""
    args = [
        f"--etcd-servers={etcd.client_url}",
        f"--etcd-prefix={etcd_prefix}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={port}",
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={files.tls_cert}",
        f"--tls-private-key-file={files.tls_key}",
        f"--client-ca-file={files.client_ca}",
        f"--token-auth-file={files.token_file}",
        "--authorization-mode=Node,RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={files.service_account_public_key}",
        f"--service-account-signing-key-file={files.service_account_key}",
        "--service-cluster-ip-range=10.96.0.0/16",
        f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
        "--allow-privileged=true",
        "--profiling=false",
        "--kubelet-preferred-address-types="
        + ("InternalIP" if files.egress_selector_config is None else "Hostname,InternalIP"),
        # Config maps are read from etcd, not the watch cache (whose window keeps old events
        # far longer than a test session): the contract's history check sees etcd compaction.
        "--watch-cache-sizes=configmaps#0",
        *gates.feature_gate_args(),
    ]
    if gates.runtime_config:
        args.append(f"--runtime-config={','.join(gates.runtime_config)}")
    if files.kubelet_client is not None:
        cert, key = files.kubelet_client
        args += [f"--kubelet-client-certificate={cert}", f"--kubelet-client-key={key}"]
    if files.egress_selector_config is not None:
        args.append(f"--egress-selector-config-file={files.egress_selector_config}")
    return args


def kubelet_egress_config(socket_path: Path) -> dict[str, object]:
    """An `EgressSelectorConfiguration` sending the apiserver's kubelet traffic (selection
    `cluster`) through an HTTP CONNECT proxy on a Unix socket; etcd and control-plane traffic
    stay direct. (Over TCP the apiserver insists on a client certificate for the proxy.)

    >>> kubelet_egress_config(Path("/run/k.sock"))["egressSelections"]
    [{'name': 'cluster', 'connection': {'proxyProtocol': 'HTTPConnect', 'transport': {'uds': \
{'udsName': '/run/k.sock'}}}}]
    """
    return {
        "apiVersion": "apiserver.k8s.io/v1beta1",
        "kind": "EgressSelectorConfiguration",
        "egressSelections": [
            {
                "name": "cluster",
                "connection": {
                    "proxyProtocol": "HTTPConnect",
                    "transport": {"uds": {"udsName": str(socket_path)}},
                },
            }
        ],
    }


def _client_args(kubeconfig: Path, port: int, cert_dir: Path) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--authorization-always-allow-paths={HEALTH_PATHS}",
        f"--bind-address={LOOPBACK}",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--leader-elect=false",
    ]


@dataclass(frozen=True)
class ControllerManagerFiles:
    """What a kube-controller-manager reads: its kubeconfig, the CA pair and the SA key."""

    kubeconfig: Path
    ca_cert: Path
    ca_key: Path
    service_account_key: Path
    cert_dir: Path


def controller_manager_args(
    port: int,
    files: ControllerManagerFiles,
    controllers: Sequence[str],
    gates: Gates,
    node_monitor_grace_period: str = "50s",
) -> list[str]:
    """A kube-controller-manager with per-controller service-account credentials."""
    return [
        *_client_args(files.kubeconfig, port, files.cert_dir),
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={files.service_account_key}",
        f"--root-ca-file={files.ca_cert}",
        f"--cluster-signing-cert-file={files.ca_cert}",
        f"--cluster-signing-key-file={files.ca_key}",
        f"--controllers={','.join(controllers)}",
        "--node-monitor-period=5s",
        f"--node-monitor-grace-period={node_monitor_grace_period}",
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        *gates.feature_gate_args(),
    ]


def scheduler_args(port: int, kubeconfig: Path, cert_dir: Path, gates: Gates) -> list[str]:
    """A kube-scheduler with the default profile."""
    return [*_client_args(kubeconfig, port, cert_dir), *gates.feature_gate_args()]
