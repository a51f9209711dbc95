"""Required pod anti-affinity, as the scheduler's InterPodAffinity filter applies it.

A pending pod's `requiredDuringSchedulingIgnoredDuringExecution` anti-affinity terms keep it
off every node whose topology domain (nodes sharing the value of the term's `topologyKey`)
already runs a pod matching the term's `labelSelector` in the term's namespaces (default: the
pod's own). The scheduler's reason for such a node is "node(s) didn't match pod anti-affinity
rules". Not emulated: preferred terms, pod affinity, `namespaceSelector`, `matchLabelKeys`,
and the symmetric check of existing pods' own anti-affinity.

Example:
    >>> matches_selector({"matchLabels": {"job": "a"}}, {"job": "a", "x": "y"})
    True
    >>> matches_selector({"matchExpressions": [{"key": "job", "operator": "NotIn",
    ...                   "values": ["a"]}]}, {"job": "a"})
    False
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from .lifecycle import is_terminal
from .store import Obj, Store

ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"


def matches_selector(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether labels match a metav1.LabelSelector (matchLabels and matchExpressions)."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression["key"], expression["operator"]
        values = expression.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def _terms(pod: Obj) -> list[Obj]:
    anti = ((pod.get("spec") or {}).get("affinity") or {}).get("podAntiAffinity") or {}
    return list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or [])


def anti_affinity_conflict(
    pod: Obj, store: Store, node: Obj, bound: Iterable[tuple[Store, Obj, Obj]]
) -> bool:
    """Whether `pod` (of `store`) may not go to `node`: a matching pod runs in its domain.

    `bound` lists (store, pod, its node) for every non-terminal pod bound to a node.
    """
    terms = _terms(pod)
    if not terms:
        return False
    node_labels = node["metadata"].get("labels") or {}
    own_namespace = pod["metadata"]["namespace"]
    for term in terms:
        key = term.get("topologyKey", "")
        if key not in node_labels:
            continue
        namespaces = term.get("namespaces") or [own_namespace]
        selector = term.get("labelSelector")
        if selector is None:
            continue  # a term without a selector matches no pod
        for other_store, other, other_node in bound:
            if other_store is not store or is_terminal(other):
                continue
            if other["metadata"]["namespace"] not in namespaces:
                continue
            if (other_node["metadata"].get("labels") or {}).get(key) != node_labels[key]:
                continue
            if matches_selector(selector, other["metadata"].get("labels") or {}):
                return True
    return False
