"""The scheduler: filters nodes as the default profile does, binds, explains, preempts.

Pods of every API server (host and vCluster tenants) compete for the host's nodes. A pod that
fits nowhere stays Pending with PodScheduled=False/Unschedulable and a FailedScheduling event
in the real message shape; a higher-priority pod evicts lower-priority ones when that lets it
fit (DisruptionTarget/PreemptionByScheduler, then graceful termination).

Example:
    >>> _summary(3, ["Insufficient cpu"] * 3)
    '0/3 nodes are available: 3 Insufficient cpu.'
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .affinity import ANTI_AFFINITY_REASON, anti_affinity_conflict
from .lifecycle import delete_pod, is_terminal, record_event, set_condition
from .quantity import pod_amounts, to_milli
from .store import ClusterState, Obj, Store

SCHEDULER = "default-scheduler"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"


@dataclass
class NodeView:
    """A node and what its bound pods already use, in thousandths."""

    node: Obj
    used: Counter[str] = field(default_factory=Counter)
    pods: list[tuple[Store, Obj]] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The node's name."""
        return str(self.node["metadata"]["name"])

    def allocatable(self) -> dict[str, int]:
        """Allocatable resources in thousandths."""
        raw = (self.node.get("status") or {}).get("allocatable") or {}
        return {name: to_milli(value) for name, value in raw.items()}


def _summary(total: int, reasons: Iterable[str]) -> str:
    counted = Counter(reasons)
    parts = sorted(f"{count} {reason}" for reason, count in counted.items())
    return f"0/{total} nodes are available: {', '.join(parts)}."


def tolerates(tolerations: list[Obj], taint: Obj) -> bool:
    """Whether one of the tolerations tolerates the taint."""
    for toleration in tolerations:
        if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
            continue
        if toleration.get("operator") == "Exists":
            if not toleration.get("key") or toleration["key"] == taint["key"]:
                return True
        elif toleration.get("key") == taint["key"] and toleration.get("value", "") == taint.get(
            "value", ""
        ):
            return True
    return False


def hard_reason(pod: Obj, node: Obj) -> str | None:
    """The first failing non-resource filter (unresolvable by preemption), if any."""
    spec = pod.get("spec") or {}
    if spec.get("resourceClaims"):  # no DRA driver is emulated: no node has any device
        return "cannot allocate all claims"
    if (node.get("spec") or {}).get("unschedulable"):
        return "node(s) were unschedulable"
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(
            spec.get("tolerations") or [], taint
        ):
            return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
    labels = node["metadata"].get("labels") or {}
    selector = spec.get("nodeSelector") or {}
    if any(labels.get(key) != value for key, value in selector.items()):
        return "node(s) didn't match Pod's node affinity/selector"
    return None


def resource_reasons(pod: Obj, view: NodeView, used: Counter[str]) -> list[str]:
    """ "Insufficient <resource>" reasons of a pod on a node, given its usage."""
    allocatable = view.allocatable()
    reasons = []
    if used["pods"] + 1000 > allocatable.get("pods", 110_000):
        reasons.append("Too many pods")
    for name, amount in sorted(pod_amounts(pod).items()):
        if amount and used[name] + amount > allocatable.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


class Scheduler:
    """Binds pending pods of every store to the host's nodes."""

    def __init__(self, cluster: ClusterState, host: Store) -> None:
        self.cluster = cluster
        self.host = host
        # pod uid → (last FailedScheduling message, the pod's resourceVersion after it): such a
        # pod is retried only when it or the nodes' occupancy changed, as the real queue does
        self._explained: dict[str, tuple[str, str]] = {}
        self._capacity_key: tuple[Any, ...] | None = None

    def _views(self) -> dict[str, NodeView]:
        views = {node["metadata"]["name"]: NodeView(node) for node in self.host.list("nodes")}
        for store in self.cluster.stores.values():
            for pod in store.list("pods"):
                view = views.get((pod.get("spec") or {}).get("nodeName", ""))
                if view is None or is_terminal(pod):
                    continue
                view.used.update(pod_amounts(pod))
                view.used["pods"] += 1000
                view.pods.append((store, pod))
        return views

    def tick(self) -> None:
        """Try to bind every pending pod once, highest priority first."""
        pending = [
            (store, pod)
            for store in self.cluster.stores.values()
            for pod in store.list("pods")
            if not (pod.get("spec") or {}).get("nodeName")
            and not pod["metadata"].get("deletionTimestamp")
            and not is_terminal(pod)
            and (pod.get("spec") or {}).get("schedulerName", SCHEDULER) == SCHEDULER
        ]
        if not pending:
            return
        pending.sort(
            key=lambda sp: (
                -sp[1]["spec"].get("priority", 0),
                sp[1]["metadata"]["creationTimestamp"],
            )
        )
        views = self._views()
        key = tuple(
            (name, view.node["metadata"].get("resourceVersion"), tuple(sorted(view.used.items())))
            for name, view in sorted(views.items())
        )
        capacity_changed, self._capacity_key = key != self._capacity_key, key
        for store, pod in pending:
            explained = self._explained.get(pod["metadata"]["uid"])
            if capacity_changed or explained is None or explained[1] != _rv(pod):
                self._schedule_one(store, pod, views)

    def _schedule_one(self, store: Store, pod: Obj, views: dict[str, NodeView]) -> None:
        reasons: list[str] = []
        hard: list[str] = []
        fitting: list[NodeView] = []
        for view in views.values():
            reason = hard_reason(pod, view.node)
            if reason:
                hard.append(reason)
                continue
            if _anti_affinity_blocks(pod, store, view, views):
                reasons.append(ANTI_AFFINITY_REASON)
                continue
            lacking = resource_reasons(pod, view, view.used)
            reasons += lacking
            if not lacking:
                fitting.append(view)
        if fitting:
            best = max(fitting, key=lambda v: self._free_share(v))
            self._bind(store, pod, best)
            return
        message = _summary(len(views), reasons + hard) if views else "no nodes available"
        nominated = None
        if views:
            message, nominated = self._preempt_or_explain(store, pod, views, message, len(hard))
        self._mark_unschedulable(store, pod, message, nominated)

    @staticmethod
    def _free_share(view: NodeView) -> float:
        allocatable = view.allocatable()
        shares = [
            1 - view.used[name] / allocatable[name]
            for name in ("cpu", "memory")
            if allocatable.get(name)
        ]
        return sum(shares)

    def _bind(self, store: Store, pod: Obj, view: NodeView) -> None:
        pod = copy.deepcopy(pod)
        pod["spec"]["nodeName"] = view.name
        status = pod.setdefault("status", {})
        status.pop("nominatedNodeName", None)
        set_condition(status, "PodScheduled", "True")
        stored = store.put("pods", pod)
        view.used.update(pod_amounts(pod))
        view.used["pods"] += 1000
        view.pods.append((store, stored))
        self._explained.pop(pod["metadata"]["uid"], None)
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        message = f"Successfully assigned {ns}/{name} to {view.name}"
        record_event(store, stored, "Scheduled", message, component=SCHEDULER)

    def _preempt_or_explain(
        self, store: Store, pod: Obj, views: dict[str, NodeView], message: str, hard: int
    ) -> tuple[str, str | None]:
        """The FailedScheduling message, and the node nominated once victims were chosen."""
        spec = pod["spec"]
        if spec.get("preemptionPolicy") == "Never":
            return f"{message} preemption: not eligible due to preemptionPolicy=Never.", None
        candidates: list[tuple[tuple[int, int], NodeView, list[tuple[Store, Obj]]]] = []
        for view in views.values():
            if hard_reason(pod, view.node) or _anti_affinity_blocks(pod, store, view, views):
                continue  # not weighing the eviction of lower-priority pods that match
            victims = self._victims(pod, view)
            if victims is not None:
                rank = (
                    len(victims),
                    max((v["spec"].get("priority", 0) for _, v in victims), default=0),
                )
                candidates.append((rank, view, victims))
        if not candidates:
            tail = _summary(len(views), [NO_VICTIMS] * (len(views) - hard) + [NOT_HELPFUL] * hard)
            return f"{message} preemption: {tail}", None
        _, view, victims = min(candidates, key=lambda c: c[0])
        for victim_store, victim in victims:
            self._evict_for(victim_store, victim, pod, view.name)
        return message, view.name

    def _victims(self, pod: Obj, view: NodeView) -> list[tuple[Store, Obj]] | None:
        """The fewest lower-priority pods whose removal lets `pod` fit, or None."""
        priority = pod["spec"].get("priority", 0)
        settled = Counter(view.used)
        for _, other in view.pods:
            if other["metadata"].get("deletionTimestamp"):
                settled.subtract(pod_amounts(other))
                settled["pods"] -= 1000
        if not resource_reasons(pod, view, settled):
            return []  # room is already being freed: wait for it
        lower = [
            (s, p)
            for s, p in view.pods
            if p["spec"].get("priority", 0) < priority
            and not p["metadata"].get("deletionTimestamp")
        ]
        freed = Counter(settled)
        for _, victim in lower:
            freed.subtract(pod_amounts(victim))
            freed["pods"] -= 1000
        if resource_reasons(pod, view, freed):
            return None
        victims = []
        for victim_store, victim in sorted(lower, key=lambda sp: -sp[1]["spec"].get("priority", 0)):
            trial = Counter(freed)
            trial.update(pod_amounts(victim))
            trial["pods"] += 1000
            if resource_reasons(pod, view, trial):
                victims.append((victim_store, victim))
            else:
                freed = trial
        return victims

    def _evict_for(self, store: Store, victim: Obj, preemptor: Obj, node: str) -> None:
        victim = copy.deepcopy(victim)
        set_condition(
            victim.setdefault("status", {}),
            "DisruptionTarget",
            "True",
            "PreemptionByScheduler",
            f"{SCHEDULER}: preempting to accommodate a higher priority pod",
        )
        stored = store.put("pods", victim)
        uid = preemptor["metadata"]["uid"]
        record_event(
            store,
            stored,
            "Preempted",
            f"Preempted by pod {uid} on node {node}",
            component=SCHEDULER,
        )
        delete_pod(store, stored)

    def _mark_unschedulable(
        self, store: Store, pod: Obj, message: str, nominated: str | None
    ) -> None:
        uid = pod["metadata"]["uid"]
        status = pod.get("status") or {}
        unchanged = nominated is None or status.get("nominatedNodeName") == nominated
        if unchanged and self._explained.get(uid, ("",))[0] == message:
            self._explained[uid] = (message, _rv(pod))
            return
        pod = copy.deepcopy(pod)
        status = pod.setdefault("status", {})
        if nominated is not None:
            status["nominatedNodeName"] = nominated
        set_condition(status, "PodScheduled", "False", "Unschedulable", message)
        stored = store.put("pods", pod)
        self._explained[uid] = (message, _rv(stored))
        record_event(store, stored, "FailedScheduling", message, "Warning", SCHEDULER)


def _anti_affinity_blocks(
    pod: Obj, store: Store, view: NodeView, views: dict[str, NodeView]
) -> bool:
    bound = [(s, p, v.node) for v in views.values() for s, p in v.pods]
    return anti_affinity_conflict(pod, store, view.node, bound)


def _rv(obj: Obj) -> str:
    return str(obj["metadata"].get("resourceVersion", ""))
