"""The node agent as a Dynamic Resource Allocation driver for its fake GPUs.

A DRA driver has two halves: a controller-side publisher of ResourceSlices (the devices of
each node, with attributes the scheduler's CEL selectors read) and a kubelet plugin that,
when a pod bound to its node has an allocated claim, prepares the allocated devices and hands
them to the container. This module plays both for the agent's nodes the way NVIDIA's
`gpu.nvidia.com` driver does, and nothing more:

- `resource_slices`: the node's pool (pool = the node's name, owned by the Node as a kubelet
  plugin publishes it): one device per GPU with `type` "gpu", `productName`, `uuid`,
  `index`, `architecture` and the `memory` capacity; with `partitions` (MIG-style profiles
  such as "1g.10gb"), also each GPU's partitions as partitionable devices (`type` "mig",
  `profile`, `parentUUID`, a `MIG-` uuid), every device of a GPU consuming that GPU's shared
  counters (`memory`, `multiprocessors`) from a second slice, so the kube-scheduler never
  allocates a whole GPU and its partitions, or more partitions than the GPU holds, at once;
- `device_classes`: the DeviceClasses the driver's chart installs (`gpu.nvidia.com` for whole
  GPUs, `mig.nvidia.com` for partitions);
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
    >>> mig = DraGpus("gpu-2", count=1, partitions=(("1g.10gb", 2),))
    >>> [d["name"] for d in resource_slice(mig, "node-uid")["spec"]["devices"]]
    ['gpu-0', 'gpu-0-mig-1g-10gb-0', 'gpu-0-mig-1g-10gb-1']
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

DRIVER = "gpu.nvidia.com"
PARTITION_CLASS = "mig.nvidia.com"  # the DeviceClass of partitions, as NVIDIA's chart names it
GROUP, VERSION = "resource.k8s.io", "v1"
Device = tuple[str, str]  # (pool, device name) of an allocated device
_PROFILE = re.compile(r"(?P<slices>[1-7])g\.(?P<gib>\d+)gb")  # "1g.10gb": compute slices, GiB


@dataclass(frozen=True)
class DraGpus:
    """The fake GPUs of one node, published as DRA devices (the node has no nvidia.com/gpu)."""

    node: str  # the agent's node that has them
    count: int
    product: str = "NVIDIA H100 80GB HBM3"  # `productName`, as NVIDIA's driver writes it
    memory: str = "80Gi"  # each device's `memory` capacity
    architecture: str = "Hopper"
    partitions: tuple[tuple[str, int], ...] = ()  # per GPU: (MIG profile, how many placements)
    multiprocessors: int = 132  # each GPU's; a partition of profile `<n>g.*` consumes n × 16

    def __post_init__(self) -> None:
        for profile, _ in self.partitions:
            if not _PROFILE.fullmatch(profile):
                raise ValueError(f"partition profile {profile!r} is not <1-7>g.<GiB>gb")

    def uuid(self, index: int, partition: str = "") -> str:
        """A stable fake GPU UUID of device `index` of this node (a `MIG-` one for one of its
        partitions, `partition` naming it)."""
        digest = hashlib.sha1(f"{self.node}/{index}{partition}".encode()).hexdigest()
        tail = f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"
        return f"MIG-{tail}" if partition else f"GPU-{tail}"

    def devices(self) -> dict[str, tuple[int, str]]:
        """Every device's name → (its GPU's index, its UUID), partitions included."""
        found = {f"gpu-{i}": (i, self.uuid(i)) for i in range(self.count)}
        for i in range(self.count):
            for name, _ in self.placements(i):
                found[name] = (i, self.uuid(i, name))
        return found

    def placements(self, index: int) -> list[tuple[str, str]]:
        """(device name, profile) of GPU `index`'s partitions."""
        return [
            (f"gpu-{index}-mig-{profile.replace('.', '-')}-{n}", profile)
            for profile, placements in self.partitions
            for n in range(placements)
        ]


def _device(gpus: DraGpus, index: int, name: str, profile: str | None) -> dict[str, Any]:
    """One device of the slice: GPU `index` whole (`profile` None) or one of its partitions."""
    match = _PROFILE.fullmatch(profile) if profile else None
    memory = f"{match['gib']}Gi" if match else gpus.memory
    sms = int(match["slices"]) * 16 if match else gpus.multiprocessors
    attributes: dict[str, Any] = {
        "type": {"string": "mig" if profile else "gpu"},
        "productName": {"string": gpus.product},
        "uuid": {"string": gpus.uuid(index, name if profile else "")},
        "index": {"int": index},
        "architecture": {"string": gpus.architecture},
    }
    if profile:
        attributes |= {"profile": {"string": profile}, "parentUUID": {"string": gpus.uuid(index)}}
    device: dict[str, Any] = {
        "name": name,
        "attributes": attributes,
        "capacity": {"memory": {"value": memory}},
    }
    if gpus.partitions:  # the whole GPU and its partitions share its counters
        used = {"memory": {"value": memory}, "multiprocessors": {"value": str(sms)}}
        device["consumesCounters"] = [{"counterSet": f"gpu-{index}", "counters": used}]
    return device


def resource_slice(gpus: DraGpus, node_uid: str) -> dict[str, Any]:
    """The node's ResourceSlice of devices: its GPUs (and their partitions) as devices of
    `DRIVER`, pool = the node's name."""
    devices = []
    for index in range(gpus.count):
        devices.append(_device(gpus, index, f"gpu-{index}", None))
        devices += [_device(gpus, index, n, p) for n, p in gpus.placements(index)]
    return _slice(gpus, node_uid, DRIVER, {"devices": devices})


def resource_slices(gpus: DraGpus, node_uid: str) -> list[dict[str, Any]]:
    """The node's pool: its devices' slice, and with partitions the slice of each GPU's shared
    counters (a slice holds devices or counters, not both)."""
    if not gpus.partitions:
        return [resource_slice(gpus, node_uid)]
    total = {
        "memory": {"value": gpus.memory},
        "multiprocessors": {"value": str(gpus.multiprocessors)},
    }
    counters = [{"name": f"gpu-{i}", "counters": total} for i in range(gpus.count)]
    shared = _slice(gpus, node_uid, f"{DRIVER}-counters", {"sharedCounters": counters})
    return [resource_slice(gpus, node_uid), shared]


def _slice(gpus: DraGpus, node_uid: str, suffix: str, body: dict[str, Any]) -> dict[str, Any]:
    owner = {"apiVersion": "v1", "kind": "Node", "name": gpus.node, "uid": node_uid}
    count = 2 if gpus.partitions else 1
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{gpus.node}-{suffix}", "ownerReferences": [owner]},
        "spec": {
            "driver": DRIVER,
            "nodeName": gpus.node,
            "pool": {"name": gpus.node, "generation": 1, "resourceSliceCount": count},
            **body,
        },
    }


def device_class(name: str = DRIVER, device_type: str = "gpu") -> dict[str, Any]:
    """A DeviceClass of the driver's devices of `device_type` (as NVIDIA's chart installs
    `gpu.nvidia.com` for whole GPUs and `mig.nvidia.com` for partitions)."""
    expression = (
        f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "{device_type}"'
    )
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def device_classes() -> list[dict[str, Any]]:
    """The driver's DeviceClasses: whole GPUs and partitions."""
    return [device_class(), device_class(PARTITION_CLASS, "mig")]


def publish(api_client: client.ApiClient, gpus: Sequence[DraGpus]) -> None:
    """Install the DeviceClass and each node's ResourceSlice (replacing a stale one)."""
    custom = client.CustomObjectsApi(api_client)
    core = client.CoreV1Api(api_client)
    for body in device_classes():
        _create(
            lambda body=body: custom.create_cluster_custom_object(
                GROUP, VERSION, "deviceclasses", body
            )
        )
    for node in gpus:
        for body in resource_slices(node, core.read_node(node.node).metadata.uid):
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
    known = gpus.devices() if gpus is not None else {}
    shown = []
    for pool, device in devices:
        if pool != node or device not in known:
            return f"device {pool}/{device} is not a device of node {node}"
        index, uuid = known[device]
        shown.append((uuid, uuid if uuid.startswith("MIG-") else str(index)))
    if not shown:
        return {}
    return {  # a partition is shown to CUDA by its MIG UUID, as NVIDIA's runtime does
        "NVIDIA_VISIBLE_DEVICES": ",".join(uuid for uuid, _ in shown),
        "CUDA_VISIBLE_DEVICES": ",".join(cuda for _, cuda in shown),
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
    "PARTITION_CLASS",
    "ClaimPreparer",
    "DraGpus",
    "device_class",
    "device_classes",
    "publish",
    "resource_slice",
    "resource_slices",
    "visible_devices",
]
