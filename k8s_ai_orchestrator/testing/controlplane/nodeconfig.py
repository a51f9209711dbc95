"""The real node's configuration files, as pure functions of its directories and addresses.

containerd (CRI on cgroupfs, overlayfs, the local pause image as sandbox image, every path in
the node's own directory), one CNI bridge network in a documentation range, and the kubelet
(cgroup v1 allowed, no swap check, no image GC, the node's taint registered at once).

Example:
    >>> layout = NodeLayout(Path("/tmp/n1"))
    >>> 'SystemdCgroup = false' in containerd_config(layout, "k8s-ai.test/pause:1", Path("/b"))
    True
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

POD_SUBNET = "203.0.113.0/24"  # documentation range (RFC 5737): never routed off the machine
BRIDGE = "k8sai0"
CNI_NETWORK = "k8sai"  # libcni's cache files under /var/lib/cni/results start with it
REAL_NODE_KEY = "k8s-ai.test/real-node"  # the node's label and taint: only pods that ask land
REAL_NODE_TAINT = {"key": REAL_NODE_KEY, "value": "true", "effect": "NoSchedule"}
REAL_NODE_TOLERATION = {
    "key": REAL_NODE_KEY,
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
RUNC = "/usr/sbin/runc"  # Debian's runc package
# Plugins that would reach outside the node's directory (NRI's socket under /var/run/nri) or
# that this machine has no use for.
DISABLED_PLUGINS = (
    "io.containerd.nri.v1.nri",
    "io.containerd.snapshotter.v1.devmapper",
    "io.containerd.snapshotter.v1.zfs",
    "io.containerd.snapshotter.v1.blockfile",
    "io.containerd.snapshotter.v1.erofs",
    "io.containerd.tracing.processor.v1.otlp",
    "io.containerd.internal.v1.tracing",
)


@dataclass(frozen=True)
class NodeLayout:
    """Where a node keeps everything, all under `root` (keep it short: shim sockets live in
    `socket_dir`, and a unix socket path has at most 107 characters)."""

    root: Path

    @property
    def containerd_root(self) -> Path:
        """containerd's persistent data: content, snapshots, metadata."""
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        """containerd's runtime state: task bundles (one per shim and container), pod netns."""
        return self.root / "state"

    @property
    def socket(self) -> Path:
        """containerd's gRPC socket; the kubelet and `ctr` talk to it."""
        return self.root / "containerd.sock"

    @property
    def socket_dir(self) -> Path:
        """The shims' sockets."""
        return self.root / "s"

    @property
    def runc_root(self) -> Path:
        """runc's state (`runc --root`): one directory per container id."""
        return self.root / "runc"

    @property
    def cni_conf_dir(self) -> Path:
        """The CNI network list containerd loads."""
        return self.root / "cni"

    @property
    def kubelet_dir(self) -> Path:
        """The kubelet's `--root-dir`: pod volumes, checkpoints, plugin sockets."""
        return self.root / "kubelet"

    @property
    def pod_logs_dir(self) -> Path:
        """The kubelet's `podLogsDir`; containerd writes container output there."""
        return self.root / "pod-logs"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value))
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {value!r}")


def _toml(tables: dict[str, dict[str, object]]) -> str:
    """TOML text of `{table name: {key: value}}`; the "" table holds top-level keys."""
    lines: list[str] = []
    for table, values in tables.items():
        if table:
            lines.append(f"\n[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def containerd_config(layout: NodeLayout, sandbox_image: str, cni_bin_dir: Path) -> str:
    """containerd's config (version 4): CRI with runc on cgroupfs, overlayfs, `sandbox_image`
    (imported, never pulled) and one CNI network list from `layout.cni_conf_dir`."""
    cri_runtime = 'plugins."io.containerd.cri.v1.runtime"'
    runc = f"{cri_runtime}.containerd.runtimes.runc"
    return _toml(
        {
            "": {
                "version": 4,
                "root": layout.containerd_root,
                "state": layout.containerd_state,
                "temp": layout.root / "tmp",
                "disabled_plugins": list(DISABLED_PLUGINS),
            },
            'plugins."io.containerd.server.v1.grpc"': {"address": layout.socket},
            'plugins."io.containerd.server.v1.ttrpc"': {"address": f"{layout.socket}.ttrpc"},
            'plugins."io.containerd.internal.v1.opt"': {"path": layout.root / "opt"},
            'plugins."io.containerd.shim.v1.manager"': {"socket_dir": layout.socket_dir},
            'plugins."io.containerd.cri.v1.images"': {"snapshotter": "overlayfs"},
            'plugins."io.containerd.cri.v1.images".pinned_images': {"sandbox": sandbox_image},
            cri_runtime: {
                "cdi_spec_dirs": [],
                "netns_mounts_under_state_dir": True,
                # No CAP_SYS_RESOURCE on these machines: no oom_score_adj below containerd's.
                "restrict_oom_score_adj": True,
            },
            f"{cri_runtime}.containerd": {"default_runtime_name": "runc"},
            runc: {"runtime_type": "io.containerd.runc.v2"},
            f"{runc}.options": {
                "SystemdCgroup": False,
                "BinaryName": RUNC,
                "Root": layout.runc_root,
            },
            f"{cri_runtime}.cni": {
                "bin_dirs": [cni_bin_dir],
                "conf_dir": layout.cni_conf_dir,
            },
            'plugins."io.containerd.grpc.v1.cri"': {
                "stream_server_address": "127.0.0.1",
                "stream_server_port": "0",
            },
        }
    )


def cni_network(layout: NodeLayout, subnet: str = POD_SUBNET) -> dict[str, Any]:
    """A CNI network list: a bridge that is the pods' gateway, no masquerade, no routes."""
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": subnet}]],
                    "dataDir": str(layout.root / "ipam"),
                },
            }
        ],
    }


@dataclass(frozen=True)
class KubeletFiles:
    """What the kubelet reads besides its config."""

    kubeconfig: Path  # client certificate system:node:NAME in system:nodes
    client_ca: Path  # verifies the apiserver's client certificate on the kubelet's port
    tls_cert: Path  # the kubelet's serving certificate
    tls_key: Path


def kubelet_config(
    layout: NodeLayout,
    files: KubeletFiles,
    address: str,
    port: int,
    healthz_port: int,
    cgroup_root: str,
) -> dict[str, Any]:
    """A KubeletConfiguration for a node on this machine's cgroup v1 and real size."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(files.tls_cert),
        "tlsPrivateKeyFile": str(files.tls_key),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(files.client_ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
        "containerRuntimeEndpoint": f"unix://{layout.socket}",
        "podLogsDir": str(layout.pod_logs_dir),
        "volumePluginDir": str(layout.root / "volume-plugins"),
        "oomScoreAdj": 0,  # a negative one needs CAP_SYS_RESOURCE, which root lacks here
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "failSwapOn": False,
        "shutdownGracePeriod": "0s",
        "shutdownGracePeriodCriticalPods": "0s",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
            "nodefs.inodesFree": "1%",
        },
        "resolvConf": "",
        "registerWithTaints": [REAL_NODE_TAINT],
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        # volume usage measured every 2 s, not every minute: an emptyDir over its sizeLimit is
        # evicted within seconds (the eviction manager looks every 10 s)
        "volumeStatsAggPeriod": "2s",
    }


def kubelet_args(
    config_file: Path,
    layout: NodeLayout,
    kubeconfig: Path,
    name: str,
    address: str,
    labels: Sequence[str] = (f"{REAL_NODE_KEY}=true",),
) -> list[str]:
    """The kubelet's flags beyond its config file (those the config has no field for)."""
    return [
        f"--config={config_file}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_dir}",
        f"--cert-dir={layout.kubelet_dir / 'pki'}",
        f"--hostname-override={name}",
        f"--node-ip={address}",
        f"--node-labels={','.join(labels)}",
        "--v=2",
    ]
