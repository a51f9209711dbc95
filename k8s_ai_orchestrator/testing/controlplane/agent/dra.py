"""The node agent as a Dynamic Resource Allocation driver for its fake GPUs.

A DRA driver has two halves: a controller-side publisher of ResourceSlices (the devices of
each node, with attributes the scheduler's CEL selectors read) and a kubelet plugin that,
when a pod bound to its node has an allocated claim, prepares the allocated devices and hands
them to the container. This module plays both for the agent's nodes the way NVIDIA's
`gpu.nvidia.com` driver does, and nothing more:

- `resource_slice`: one ResourceSlice per node (pool = the node's name, owned by the Node as
  a kubelet plugin publishes it), one device per GPU with `type`, `productName`, `uuid`,
  `index`, `architecture` and the `memory` capacity;
- `device_class`: the DeviceClass the driver's chart installs (`device.driver == ...`);
- `ClaimPreparer.prepare`: for a pod whose claims the kube-scheduler allocated and reserved
  for it, the visible-device environment of its allocated devices; while a claim is not
  allocated, not reserved for the pod, or holds devices that are not this node's, a reason
  instead, and the pod does not start (a real kubelet keeps such a pod in ContainerCreating
  with a `FailedPrepareDynamicResources` event). Which devices a pod gets is the scheduler's
  choice; nothing here picks them.

Example:
    >>> gpus = DraGpus("gpu-1", count=2, product="NVIDIA H100 80GB HBM3", memory="80Gi")
    >>> [d["name"] for d in resource_slice(gpus, "node-uid")["spec"]["devices"]]
    ['gpu-0', 'gpu-1']
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

DRIVER = "gpu.nvidia.com"
GROUP, VERSION = "resource.k8s.io", "v1"
Device = tuple[str, str]  # (pool, device name) of an allocated device


@dataclass(frozen=True)
class DraGpus:
    """The fake GPUs of one node, published as DRA devices (the node has no nvidia.com/gpu)."""

    node: str  # the agent's node that has them
    count: int
    product: str = "NVIDIA H100 80GB HBM3"  # `productName`, as NVIDIA's driver writes it
    memory: str = "80Gi"  # each device's `memory` capacity
    architecture: str = "Hopper"

    def uuid(self, index: int) -> str:
        """A stable fake GPU UUID of device `index` of this node."""
        digest = hashlib.sha1(f"{self.node}/{index}".encode()).hexdigest()
        return f"GPU-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def resource_slice(gpus: DraGpus, node_uid: str) -> dict[str, Any]:
    """The node's ResourceSlice: its GPUs as devices of `DRIVER`, pool = the node's name."""
    devices = [
        {
            "name": f"gpu-{index}",
            "attributes": {
                "type": {"string": "gpu"},
                "productName": {"string": gpus.product},
                "uuid": {"string": gpus.uuid(index)},
                "index": {"int": index},
                "architecture": {"string": gpus.architecture},
            },
            "capacity": {"memory": {"value": gpus.memory}},
        }
        for index in range(gpus.count)
    ]
    owner = {"apiVersion": "v1", "kind": "Node", "name": gpus.node, "uid": node_uid}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{gpus.node}-{DRIVER}", "ownerReferences": [owner]},
        "spec": {
            "driver": DRIVER,
            "nodeName": gpus.node,
            "pool": {"name": gpus.node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def device_class() -> dict[str, Any]:
    """The DeviceClass of the driver's GPUs (as NVIDIA's chart installs `gpu.nvidia.com`)."""
    expression = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "gpu"'
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def publish(api_client: client.ApiClient, gpus: Sequence[DraGpus]) -> None:
    """Install the DeviceClass and each node's ResourceSlice (replacing a stale one)."""
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    _create(
        lambda: custom.create_cluster_custom_object(GROUP, VERSION, "deviceclasses", device_class())
    )
    for node in gpus:
        body = resource_slice(node, core.read_node(node.node).metadata.uid)
        name = body["metadata"]["name"]
        try:
            custom.delete_cluster_custom_object(GROUP, VERSION, "resourceslices", name)
        except ApiException as error:
            if error.status != 404:
                raise
        custom.create_cluster_custom_object(GROUP, VERSION, "resourceslices", body)


def _create(call: Any) -> None:
    try:
        call()
    except ApiException as error:
        if error.status != 409:
            raise


def visible_devices(gpus: DraGpus | None, devices: list[Device], node: str) -> dict[str, str] | str:
    """The environment that shows a container the allocated `devices`, or why they cannot be
    prepared on `node` (whose GPUs are `gpus`): a device of another pool, or none of its own.

    Example:
        >>> visible_devices(DraGpus("n1", count=4), [("n1", "gpu-2")], "n1")["CUDA_VISIBLE_DEVICES"]
        '2'
        >>> visible_devices(DraGpus("n1", count=4), [("n2", "gpu-0")], "n1")
        'device n2/gpu-0 is not a device of node n1'
    """
    indexes = []
    for pool, device in devices:
        index = int(device.removeprefix("gpu-")) if device.startswith("gpu-") else -1
        if gpus is None or pool != node or not 0 <= index < gpus.count:
            return f"device {pool}/{device} is not a device of node {node}"
        indexes.append(index)
    if gpus is None or not indexes:
        return {}
    return {
        "NVIDIA_VISIBLE_DEVICES": ",".join(gpus.uuid(i) for i in indexes),
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in indexes),
    }


class ClaimPreparer:
    """The kubelet-plugin half: the environment of a pod's allocated devices (see above)."""

    def __init__(self, api_client: client.ApiClient, gpus: Sequence[DraGpus]) -> None:
        self._custom = client.CustomObjectsApi(api_client)
        self._gpus = {g.node: g for g in gpus}

    def prepare(self, pod: dict[str, Any], node: str) -> dict[str, str] | str:
        """The visible-device environment of the pod's claims, or why they are not ready."""
        namespace = pod["metadata"]["namespace"]
        statuses = {
            s["name"]: s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        devices: list[Device] = []
        for claim_ref in pod["spec"].get("resourceClaims") or []:
            name = claim_ref.get("resourceClaimName") or statuses.get(claim_ref["name"])
            if not name:
                return f"waiting for the ResourceClaim of pod claim {claim_ref['name']!r}"
            found = self._claim_devices(namespace, name, pod["metadata"]["uid"])
            if isinstance(found, str):
                return found
            devices += found
        return visible_devices(self._gpus.get(node), devices, node)

    def _claim_devices(self, namespace: str, name: str, pod_uid: str) -> list[Device] | str:
        try:
            claim = self._custom.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "resourceclaims", name
            )
        except ApiException as error:
            if error.status == 404:
                return f'ResourceClaim "{name}" not found'
            raise
        status = claim.get("status") or {}
        if pod_uid not in {r.get("uid") for r in status.get("reservedFor") or []}:
            return f'ResourceClaim "{name}" is not allocated and reserved for this pod'
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        for result in results:
            if result.get("driver") != DRIVER:
                return f"DRA driver {result.get('driver')} is not registered on this node"
        return [(r["pool"], r["device"]) for r in results]


__all__ = [
    "DRIVER",
    "ClaimPreparer",
    "DraGpus",
    "device_class",
    "publish",
    "resource_slice",
    "visible_devices",
]
