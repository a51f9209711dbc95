"""Node pools that an autoscaler grows: what pre-flight may count on besides the nodes that exist.

On a cluster whose GPU and high-memory pools sit at zero nodes (Karpenter NodePools,
cluster-autoscaler node groups, GKE node auto-provisioning, vCluster Auto Nodes), the largest
node that exists now says nothing about what a step can get. A tenant's `node_pools` declare,
per pool, the allocatable resources of the largest node it creates, the labels its nodes carry,
and optionally its total ceiling (a NodePool's `spec.limits`, or max nodes × the node):

    node_pools:
      - name: highmem
        node: {cpu: 96, memory: 760Gi}
        limit: {cpu: 192, memory: 1520Gi}
      - name: gpu
        node: {cpu: 64, memory: 900Gi, gpu: 8}
        labels: {k8s-ai/gpu-type: h100}
        limit: {gpu: 16}

`pool_verdict` is the pure decision: which pools could create nodes for the step's pods (and
how many), or, when none can, each pool's reason in words that name the pool and its limit.

Example:
    >>> pools = node_pools([{"name": "highmem", "node": {"cpu": 96, "memory": "760Gi"},
    ...     "limit": {"memory": "1000Gi"}}], "kubernetes.tenants.a.node_pools")
    >>> needs = {"cpu": Decimal(72), "memory": Decimal(450 * 2**30), "gpu": Decimal(0)}
    >>> pool_verdict(pools, needs, pods=1, node_labels={}).nodes
    {'highmem': 2}
    >>> print(pool_verdict(pools, needs, pods=3, node_labels={}).why)
    pool 'highmem' can create 2 such nodes before its limit of memory 1000Gi
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from ...errors import ConfigError, check_keys
from .capacity import Needs, show

KINDS = ("cpu", "memory", "gpu")  # what a pool's node and limit may name
_POOL_KEYS = frozenset({"name", "node", "labels", "limit"})


@dataclass(frozen=True)
class NodePool:
    """One autoscaled pool, as the tenant's config declares it."""

    name: str
    node: Mapping[str, Decimal]  # allocatable of the largest node it creates, by kind
    labels: Mapping[str, str] = field(default_factory=dict)  # labels its nodes carry
    limit: Mapping[str, Decimal] = field(default_factory=dict)  # its ceiling; absent: none

    def short_of(self, needs: Needs) -> list[str]:
        """The kinds of `needs` one pod asks more of than the pool's node holds."""
        return [kind for kind in needs if needs[kind] > self.node.get(kind, Decimal(0))]

    def nodes_under_limit(self, needs: Needs) -> int | None:
        """How many nodes, each holding one pod of `needs`, fit under the limit (None: no
        limit)."""
        counts = [int(self.limit[k] // needs[k]) for k in self.limit if needs.get(k)]
        return min(counts) if counts else None


def node_pools(raw: Any, where: str) -> tuple[NodePool, ...]:
    """The checked `node_pools` list; `ConfigError` naming the key, the value and the fix."""
    if raw is None:
        return ()
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        raise ConfigError(f"{where} must be a list of pools, got {type(raw).__name__}")
    pools = [_pool(entry, f"{where}[{i}]") for i, entry in enumerate(raw)]
    names = [p.name for p in pools]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: pool names repeat ({', '.join(names)}); give each its own")
    return tuple(pools)


def _pool(raw: Any, where: str) -> NodePool:
    check_keys(raw, _POOL_KEYS, where)
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"{where}.name must be the pool's name (its NodePool or node group)")
    if "node" not in raw:
        raise ConfigError(
            f"{where} ({name}): give node, the allocatable cpu, memory (and gpu) of the largest "
            "node this pool creates, e.g. node: {cpu: 96, memory: 760Gi}"
        )
    node = _amounts(raw["node"], f"{where}.node")
    if not node.get("cpu") or not node.get("memory"):
        raise ConfigError(f"{where}.node must give both cpu and memory (above 0)")
    labels = raw.get("labels") or {}
    if not isinstance(labels, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
    ):
        raise ConfigError(f"{where}.labels must map label keys to string values")
    return NodePool(name, node, dict(labels), _amounts(raw.get("limit") or {}, f"{where}.limit"))


def _amounts(raw: Any, where: str) -> dict[str, Decimal]:
    check_keys(raw, KINDS, where)
    amounts = {}
    for kind, value in raw.items():
        try:
            amount = parse_quantity(value)
        except (ValueError, TypeError):
            amount = Decimal(-1)
        if amount < 0 or isinstance(value, bool):
            raise ConfigError(
                f"{where}.{kind}={value!r} is not a quantity; write e.g. 96, 760Gi or 8"
            )
        amounts[kind] = amount
    return amounts


@dataclass(frozen=True)
class PoolVerdict:
    """Which pools could create nodes for the step's pods, or why none can."""

    nodes: Mapping[str, int | None]  # pool → nodes it could create for them (None: unbounded)
    reasons: Sequence[str]  # per pool that cannot (enough), why

    def holds(self, pods: int) -> bool:
        """Whether the pools together could create nodes for `pods` pods."""
        counts = list(self.nodes.values())
        return any(n is None for n in counts) or sum(n or 0 for n in counts) >= pods

    @property
    def why(self) -> str:
        return "; ".join(self.reasons)


def pool_verdict(
    pools: Sequence[NodePool], needs: Needs, *, pods: int, node_labels: Mapping[str, str]
) -> PoolVerdict:
    """Pools whose nodes carry `node_labels` and whose node holds one pod of `needs`, with how
    many such nodes each may create under its limit; the others' reasons."""
    nodes: dict[str, int | None] = {}
    reasons = []
    for pool in pools:
        missing = {k: v for k, v in node_labels.items() if pool.labels.get(k) != v}
        short = pool.short_of(needs)
        if missing:
            wanted = ", ".join(f"{k}={v}" for k, v in missing.items())
            reasons.append(f"pool '{pool.name}' nodes do not carry {wanted}")
        elif short:
            reasons.append(
                f"pool '{pool.name}' creates nodes of at most "
                + ", ".join(f"{k} {show(k, pool.node.get(k, Decimal(0)))}" for k in short)
            )
        else:
            count = pool.nodes_under_limit(needs)
            nodes[pool.name] = count
            if count is not None and count < pods:
                limit = ", ".join(f"{k} {show(k, v)}" for k, v in pool.limit.items())
                reasons.append(
                    f"pool '{pool.name}' can create {count} such node{'s' * (count != 1)} "
                    f"before its limit of {limit}"
                )
    return PoolVerdict(nodes, reasons)
