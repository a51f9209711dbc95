"""What Karpenter provisions on the test plane: the kwok provider's instance-type catalog (a file
of our own; the provider's built-in one has no GPU shape) and the NodePools, as plain data and
the manifests made from them. `karpenter.py` runs Karpenter with them.

Example:
    >>> [pool.name for pool in DEFAULT_POOLS]
    ['cpu', 'highmem', 'gpu']
    >>> node_pool(DEFAULT_POOLS[2])["spec"]["limits"]
    {'nvidia.com/gpu': '16'}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..kube.quantity import GPU

Obj = dict[str, Any]

GROUP = "karpenter.sh"
VERSION = "v1"
NODE_CLASS_GROUP = "karpenter.kwok.sh"
NODE_CLASS_VERSION = "v1alpha1"
NODE_CLASS_KIND = "KWOKNodeClass"
NODE_CLASS = "default"
NODEPOOL_LABEL = "karpenter.sh/nodepool"  # on every NodeClaim and Node Karpenter launches
PROVIDER_PREFIX = "kwok://"  # the providerID of the Nodes the kwok provider creates
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE = "zone-a"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}  # as the plane's GPU node
# On every node of the default pools: a pod that selects it never lands on the node agent's
# fixed nodes of the same plane.
AUTOSCALED_LABEL = "k8s-ai-orchestrator/autoscaled"
AUTOSCALED = {AUTOSCALED_LABEL: "true"}


@dataclass(frozen=True)
class KwokShape:
    """One instance type of the kwok provider's catalog.

    Example:
        >>> KwokShape("gpu-8", cpu=64, memory="512Gi", gpus=8).resources()["nvidia.com/gpu"]
        '8'
    """

    name: str  # the Node's `node.kubernetes.io/instance-type`
    cpu: int
    memory: str  # a Kubernetes quantity
    gpus: int = 0  # `nvidia.com/gpu` in the Node's allocatable
    price: float = 1.0  # per hour, on demand; Karpenter launches the cheapest shape that fits
    pods: int = 110

    def resources(self) -> dict[str, str]:
        """The shape's capacity as the catalog file states it."""
        resources = {"cpu": str(self.cpu), "memory": self.memory, "pods": str(self.pods)}
        if self.gpus:
            resources[GPU] = str(self.gpus)
        return resources


# Shaped like the plane's fixed nodes (tests/plane_fixtures.py): the high-memory shape holds an
# `xl` step (72 CPU / 450Gi), the big GPU shape a `gpu-8` step.
CATALOG = (
    KwokShape("cpu-8", cpu=8, memory="32Gi", price=0.4),
    KwokShape("cpu-16", cpu=16, memory="64Gi", price=0.8),
    KwokShape("cpu-32", cpu=32, memory="128Gi", price=1.6),
    KwokShape("mem-96", cpu=96, memory="768Gi", price=6.0),
    KwokShape("gpu-1", cpu=8, memory="64Gi", gpus=1, price=3.0),
    KwokShape("gpu-8", cpu=64, memory="512Gi", gpus=8, price=24.0),
)


def catalog_json(shapes: Iterable[KwokShape]) -> str:
    """The catalog file the kwok provider reads (`INSTANCE_TYPES_FILE_PATH`): every shape
    linux/amd64, offered on demand in one zone.

    Example:
        >>> json.loads(catalog_json(CATALOG[:1]))[0]["resources"]["cpu"]
        '8'
    """
    offering_requirements = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]},
    ]
    entries = [
        {
            "name": shape.name,
            "offerings": [
                {"Price": shape.price, "Available": True, "Requirements": offering_requirements}
            ],
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": shape.resources(),
        }
        for shape in shapes
    ]
    return json.dumps(entries, indent=1)


@dataclass(frozen=True)
class PoolSpec:
    """A NodePool: which catalog shapes it may launch, its limits, and how fast it empties."""

    name: str
    shapes: tuple[str, ...]  # instance-type names from the catalog
    limits: Mapping[str, str]  # the pool's total, e.g. {"cpu": "64"}; Karpenter stops there
    taints: tuple[Mapping[str, str], ...] = ()
    consolidate_after: str = "5s"  # an empty node goes this long after its last pod
    # Karpenter tries pools by weight, highest first (with equal weights it took `highmem`
    # before `cpu` for a 4 CPU pod on this plane)
    weight: int | None = None  # 1 to 100; None: Karpenter's 0
    labels: Mapping[str, str] = field(default_factory=dict)  # on every node of the pool


DEFAULT_POOLS = (
    PoolSpec("cpu", ("cpu-8", "cpu-16", "cpu-32"), {"cpu": "64"}, weight=30, labels=AUTOSCALED),
    PoolSpec(
        "highmem", ("mem-96",), {"cpu": "192", "memory": "1536Gi"}, weight=20, labels=AUTOSCALED
    ),
    PoolSpec(
        "gpu", ("gpu-1", "gpu-8"), {GPU: "16"}, taints=(GPU_TAINT,), weight=10, labels=AUTOSCALED
    ),
)


def node_pool(pool: PoolSpec) -> Obj:
    """The NodePool manifest: the pool's shapes on the kwok node class, its limits and weight,
    empty nodes removed `consolidate_after` after their last pod, never expired.

    Example:
        >>> node_pool(DEFAULT_POOLS[0])["spec"]["disruption"]["consolidationPolicy"]
        'WhenEmpty'
    """
    requirement = {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(pool.shapes)}
    template_spec: Obj = {
        "nodeClassRef": {"group": NODE_CLASS_GROUP, "kind": NODE_CLASS_KIND, "name": NODE_CLASS},
        "requirements": [requirement],
        "expireAfter": "Never",
    }
    if pool.taints:
        template_spec["taints"] = [dict(t) for t in pool.taints]
    weight = {} if pool.weight is None else {"weight": pool.weight}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodePool",
        "metadata": {"name": pool.name},
        "spec": {
            **weight,
            "template": {"metadata": {"labels": dict(pool.labels)}, "spec": template_spec},
            "limits": dict(pool.limits),
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": pool.consolidate_after,
                "budgets": [{"nodes": "100%"}],
            },
        },
    }


def declared_pools(
    pools: Iterable[PoolSpec] = DEFAULT_POOLS, catalog: Iterable[KwokShape] = CATALOG
) -> list[Obj]:
    """The tenant config's `node_pools` that declare these NodePools to the executor: per pool
    its largest shape (the most GPUs, then the most CPUs), its labels and its limits.

    Example:
        >>> declared_pools()[2]["node"], declared_pools()[2]["limit"]
        ({'cpu': 64, 'memory': '512Gi', 'gpu': 8}, {'gpu': '16'})
    """
    shapes = {shape.name: shape for shape in catalog}
    declared = []
    for pool in pools:
        own = [shapes[name] for name in pool.shapes]
        largest = max(own, key=lambda shape: (shape.gpus, shape.cpu))
        node: Obj = {"cpu": largest.cpu, "memory": largest.memory}
        if largest.gpus:
            node["gpu"] = largest.gpus
        limit = {("gpu" if kind == GPU else kind): value for kind, value in pool.limits.items()}
        declared.append(
            {"name": pool.name, "node": node, "labels": dict(pool.labels), "limit": limit}
        )
    return declared
