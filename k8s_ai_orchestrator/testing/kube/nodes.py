"""The nodes of the emulated host cluster, as the kubelet would register them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .store import Obj, new_uid, now_rfc3339

_NODE_INFO = {
    "architecture": "amd64",
    "bootID": "",
    "containerRuntimeVersion": "emulator://1.0",
    "kernelVersion": "",
    "kubeProxyVersion": "v1.37.2",
    "kubeletVersion": "v1.37.2",
    "machineID": "",
    "operatingSystem": "linux",
    "osImage": "kube-emulator",
    "systemUUID": "",
}


@dataclass(frozen=True)
class NodeSpec:
    """A node of the emulated host cluster.

    Example:
        >>> NodeSpec("gpu-1", cpu="32", memory="256Gi", gpus=8,
        ...          taints=({"key": "gpu", "value": "true", "effect": "NoSchedule"},)).gpus
        8
    """

    name: str
    cpu: str = "16"  # allocatable CPU cores (Kubernetes quantity)
    memory: str = "64Gi"  # allocatable memory (Kubernetes quantity)
    gpus: int = 0  # nvidia.com/gpu capacity
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()  # {"key", "value", "effect"} dicts

    def to_object(self) -> Obj:
        """The Node object the host API serves."""
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": "110"}
        if self.gpus:
            capacity["nvidia.com/gpu"] = str(self.gpus)
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **self.labels,
        }
        ready = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now_rfc3339(),
            "lastTransitionTime": now_rfc3339(),
        }
        return {
            "kind": "Node",
            "apiVersion": "v1",
            "metadata": {
                "name": self.name,
                "uid": new_uid(),
                "labels": labels,
                "creationTimestamp": now_rfc3339(),
            },
            "spec": {"taints": [dict(t) for t in self.taints]} if self.taints else {},
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": [ready],
                "addresses": [
                    {"type": "InternalIP", "address": "127.0.0.1"},
                    {"type": "Hostname", "address": self.name},
                ],
                "nodeInfo": _NODE_INFO,
            },
        }
