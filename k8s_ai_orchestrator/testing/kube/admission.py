"""Pod admission as the real plugins do it: Priority, LimitRanger, ResourceQuota.

Example:
    >>> from .store import ClusterState
    >>> store = ClusterState().new_store("host")
    >>> pod = {"metadata": {"name": "p", "namespace": "d"},
    ...        "spec": {"containers": [{"name": "main"}]}}
    >>> admit_pod(store, pod)
    >>> pod["spec"]["priority"]
    0
"""

from __future__ import annotations

import copy

from .lifecycle import is_terminal
from .quantity import GPU, container_amounts, format_quantity, pod_amounts, to_milli
from .store import ApiError, Obj, Store

BUILTIN_PRIORITIES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}


def _forbidden(pod: Obj, message: str) -> ApiError:
    name = pod["metadata"]["name"]
    return ApiError(
        403,
        "Forbidden",
        f'pods "{name}" is forbidden: {message}',
        {"name": name, "kind": "pods"},
    )


def resolve_priority(store: Store, pod: Obj) -> None:
    """Resolve spec.priority from the PriorityClass (403 if it does not exist)."""
    spec = pod["spec"]
    name = spec.get("priorityClassName")
    classes = {pc["metadata"]["name"]: pc for pc in store.list("priorityclasses")}
    if name:
        if name in BUILTIN_PRIORITIES:
            spec["priority"] = BUILTIN_PRIORITIES[name]
            return
        if name not in classes:
            raise _forbidden(pod, f"no PriorityClass with name {name} was found")
        chosen = classes[name]
    else:
        defaults = [pc for pc in classes.values() if pc.get("globalDefault")]
        if not defaults:
            spec["priority"] = 0
            return
        chosen = defaults[0]
        spec["priorityClassName"] = chosen["metadata"]["name"]
    spec["priority"] = int(chosen["value"])
    spec["preemptionPolicy"] = chosen.get("preemptionPolicy", "PreemptLowerPriority")


def apply_limit_ranges(store: Store, pod: Obj) -> None:
    """Fill container defaults from LimitRanges and enforce their per-container maximum."""
    for limit_range in store.list("limitranges", pod["metadata"]["namespace"]):
        for item in (limit_range.get("spec") or {}).get("limits") or []:
            if item.get("type") != "Container":
                continue
            for container in pod["spec"].get("containers") or []:
                _default_container_resources(container, item)
                _check_maximum(pod, container, item)


def _default_container_resources(container: Obj, item: Obj) -> None:
    resources = container.setdefault("resources", {})
    limits = resources.setdefault("limits", {})
    requests = resources.setdefault("requests", {})
    for name, value in (item.get("default") or {}).items():
        limits.setdefault(name, value)
    for name, value in (item.get("defaultRequest") or {}).items():
        requests.setdefault(name, value)
    for name, value in limits.items():
        requests.setdefault(name, value)
    for key in ("limits", "requests"):
        if not resources[key]:
            del resources[key]


def _check_maximum(pod: Obj, container: Obj, item: Obj) -> None:
    limits = (container.get("resources") or {}).get("limits") or {}
    for name, maximum in (item.get("max") or {}).items():
        if name in limits and to_milli(limits[name]) > to_milli(maximum):
            raise _forbidden(
                pod,
                f"maximum {name} usage per Container is {maximum}, but limit is {limits[name]}",
            )


def quota_usage_of_pod(pod: Obj) -> dict[str, int]:
    """The quota resource names a pod consumes, in thousandths."""
    requests, limits = pod_amounts(pod, "requests"), pod_amounts(pod, "limits")
    usage = {"pods": 1000, "count/pods": 1000}
    for name, value in requests.items():
        usage[f"requests.{name}"] = value
        if name in ("cpu", "memory"):
            usage[name] = value
    for name, value in limits.items():
        usage[f"limits.{name}"] = value
    return usage


def namespace_usage(store: Store, namespace: str) -> dict[str, int]:
    """What the namespace's live pods consume, by quota resource name."""
    total: dict[str, int] = {}
    for pod in store.list("pods", namespace):
        if is_terminal(pod) or pod["metadata"].get("deletionTimestamp"):
            continue
        for name, value in quota_usage_of_pod(pod).items():
            total[name] = total.get(name, 0) + value
    return total


def check_quotas(store: Store, pod: Obj) -> None:
    """Reject the pod (403 Forbidden, real message) if it would exceed a quota."""
    namespace = pod["metadata"]["namespace"]
    requested = quota_usage_of_pod(pod)
    used = namespace_usage(store, namespace)
    for quota in sorted(
        store.list("resourcequotas", namespace), key=lambda q: q["metadata"]["name"]
    ):
        hard = (quota.get("spec") or {}).get("hard") or {}
        name = quota["metadata"]["name"]
        _check_specified(pod, name, hard)
        over = sorted(
            key
            for key, limit in hard.items()
            if key in requested and used.get(key, 0) + requested[key] > to_milli(limit)
        )
        if over:
            shown = {
                "requested": ",".join(f"{k}={format_quantity(k, requested[k])}" for k in over),
                "used": ",".join(f"{k}={format_quantity(k, used.get(k, 0))}" for k in over),
                "limited": ",".join(f"{k}={hard[k]}" for k in over),
            }
            details = ", ".join(f"{label}: {text}" for label, text in shown.items())
            raise _forbidden(pod, f"exceeded quota: {name}, {details}")


def _check_specified(pod: Obj, quota_name: str, hard: dict[str, str]) -> None:
    """A quota on cpu/memory requests or limits requires every container to set them."""
    missing = []
    for key in sorted(hard):
        section, _, resource = key.partition(".")
        if section not in ("requests", "limits") or resource not in ("cpu", "memory", GPU):
            continue
        lacking = [
            c["name"]
            for c in pod["spec"].get("containers") or []
            if resource not in container_amounts(c, section) and resource != GPU
        ]
        if lacking:
            missing.append(f"{key} for: {','.join(lacking)}")
    if missing:
        raise _forbidden(pod, f"failed quota: {quota_name}: must specify {'; '.join(missing)}")


def admit_pod(store: Store, pod: Obj) -> None:
    """The admission chain a pod create goes through (mutating, then validating)."""
    resolve_priority(store, pod)
    apply_limit_ranges(store, pod)
    check_quotas(store, pod)


def refresh_quota_status(store: Store) -> None:
    """Keep every ResourceQuota's status.hard and status.used current."""
    for quota in store.list("resourcequotas"):
        hard = (quota.get("spec") or {}).get("hard") or {}
        usage = namespace_usage(store, quota["metadata"]["namespace"])
        used = {key: format_quantity(key, usage.get(key, 0)) for key in hard}
        status = {"hard": dict(hard), "used": used}
        if quota.get("status") != status:
            quota = copy.deepcopy(quota)
            quota["status"] = status
            store.put("resourcequotas", quota)
