"""Object lifecycle shared by the API layer and the controllers: deletion, finalizers, events.

Deletion follows the real rules: an object with finalizers gets a deletionTimestamp and stays
until they are removed; a bound, unfinished pod is terminated by the kubelet first (grace
period) and then removed; a Job's pods are orphaned by default, deleted with Background or
Foreground propagation.

Example:
    >>> from .store import ClusterState
    >>> store = ClusterState().new_store("host")
    >>> pod = {"kind": "Pod", "metadata": {"namespace": "d", "name": "p", "uid": "u"}}
    >>> _ = store.put("pods", pod)
    >>> delete_object(store, "pods", "d", "p")["metadata"]["name"], store.get("pods", "d", "p")
    ('p', None)
"""

from __future__ import annotations

import copy
import time
from typing import Any

from .store import Obj, Store, new_uid, not_found, now_rfc3339, random_suffix

TERMINAL_PHASES = ("Succeeded", "Failed")
JOB_TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
FOREGROUND_FINALIZER = "foregroundDeletion"


def is_terminal(pod: Obj) -> bool:
    """Whether the pod reached Succeeded or Failed."""
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def releasable(resource: str, obj: Obj) -> bool:
    """A deleted object may leave the store: no finalizers and, for pods, nothing running."""
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp") or meta.get("finalizers"):
        return False
    if resource == "pods":
        return is_terminal(obj) or not (obj.get("spec") or {}).get("nodeName")
    return True


def put_or_release(store: Store, resource: str, obj: Obj) -> Obj:
    """Write `obj`, or remove it when it was deleted and nothing holds it any more."""
    if releasable(resource, obj):
        meta = obj["metadata"]
        return store.remove(resource, meta.get("namespace", ""), meta["name"], obj) or obj
    return store.put(resource, obj)


def set_condition(
    status: dict[str, Any], type_: str, value: str, reason: str = "", message: str = ""
) -> bool:
    """Set a condition, keeping lastTransitionTime when the value did not change."""
    conditions = status.setdefault("conditions", [])
    for condition in conditions:
        if condition["type"] == type_:
            changed = (condition["status"], condition.get("reason"), condition.get("message"))
            if changed == (value, reason or None, message or None):
                return False
            if condition["status"] != value:
                condition["lastTransitionTime"] = now_rfc3339()
            condition.update(status=value)
            _set_optional(condition, reason, message)
            return True
    condition = {"type": type_, "status": value, "lastTransitionTime": now_rfc3339()}
    _set_optional(condition, reason, message)
    conditions.append(condition)
    return True


def _set_optional(condition: dict[str, Any], reason: str, message: str) -> None:
    for key, value in (("reason", reason), ("message", message)):
        if value:
            condition[key] = value
        else:
            condition.pop(key, None)


def record_event(
    store: Store,
    involved: Obj,
    reason: str,
    message: str,
    type_: str = "Normal",
    component: str = "kubelet",
) -> None:
    """Record a core/v1 Event about `involved`, bumping the count of an identical one."""
    meta = involved["metadata"]
    namespace = meta.get("namespace") or "default"
    key = (namespace, str(meta.get("uid")), reason, message)
    existing = store.get("events", namespace, store.event_names.get(key, ""))
    if existing is not None:
        event = copy.deepcopy(existing)
        event["count"] = event.get("count", 1) + 1
        event["lastTimestamp"] = now_rfc3339()
        store.put("events", event)
        return
    stamp = now_rfc3339()
    store.event_names[key] = name = f"{meta['name']}.{random_suffix(10)}"
    store.put(
        "events",
        {
            "kind": "Event",
            "apiVersion": "v1",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": new_uid(),
                "creationTimestamp": stamp,
            },
            "involvedObject": {
                "kind": involved.get("kind"),
                "namespace": namespace,
                "name": meta["name"],
                "uid": meta.get("uid"),
                "apiVersion": involved.get("apiVersion"),
                "resourceVersion": meta.get("resourceVersion"),
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": component},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": component,
            "reportingInstance": "",
        },
    )


def delete_pod(store: Store, pod: Obj, grace: int | None = None) -> Obj:
    """Start a pod's deletion: immediate when nothing runs, graceful (kubelet) otherwise."""
    pod = copy.deepcopy(pod)
    meta, spec = pod["metadata"], pod.get("spec") or {}
    if grace is None:
        grace = int(spec.get("terminationGracePeriodSeconds", 30))
    if meta.get("deletionTimestamp"):
        if grace < meta.get("deletionGracePeriodSeconds", grace + 1):
            meta["deletionGracePeriodSeconds"] = grace
            return store.put("pods", pod)
        return pod
    running = spec.get("nodeName") and not is_terminal(pod)
    meta["deletionTimestamp"] = now_rfc3339(time.time() + (grace if running else 0))
    meta["deletionGracePeriodSeconds"] = grace if running else 0
    if not running and not spec.get("nodeName") and meta.get("finalizers"):
        pod.setdefault("status", {})["phase"] = "Failed"
    return put_or_release(store, "pods", pod)


def disrupt(store: Store, pod: Obj, reason: str, message: str) -> Obj:
    """Mark a pod as a disruption target (eviction, preemption, node loss) before deleting it."""
    pod = copy.deepcopy(pod)
    set_condition(pod.setdefault("status", {}), "DisruptionTarget", "True", reason, message)
    return store.put("pods", pod)


def dependents(store: Store, owner: Obj) -> list[Obj]:
    """Pods whose ownerReferences name `owner`."""
    uid = owner["metadata"]["uid"]
    namespace = owner["metadata"].get("namespace")
    return [
        pod
        for pod in store.list("pods", namespace)
        if any(ref.get("uid") == uid for ref in pod["metadata"].get("ownerReferences") or [])
    ]


def _orphan(store: Store, owner: Obj) -> None:
    uid = owner["metadata"]["uid"]
    for pod in dependents(store, owner):
        pod = copy.deepcopy(pod)
        refs = [ref for ref in pod["metadata"]["ownerReferences"] if ref.get("uid") != uid]
        pod["metadata"]["ownerReferences"] = refs
        store.put("pods", pod)


def delete_object(
    store: Store,
    resource: str,
    namespace: str,
    name: str,
    grace: int | None = None,
    propagation: str | None = None,
) -> Obj:
    """Delete as the API server does; returns the object (with deletionTimestamp if pending)."""
    obj = store.get(resource, namespace, name)
    if obj is None:
        raise not_found(resource, name)
    if resource == "pods":
        return delete_pod(store, obj, grace)
    if resource == "namespaces":
        return _delete_namespace(store, obj)
    policy = propagation or ("Orphan" if resource == "jobs" else "Background")
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    if policy == "Orphan":
        _orphan(store, obj)
    else:
        for pod in dependents(store, obj):
            delete_pod(store, pod)
        if policy == "Foreground" and dependents(store, obj):
            meta.setdefault("finalizers", []).append(FOREGROUND_FINALIZER)
    meta.setdefault("deletionTimestamp", now_rfc3339())
    meta.setdefault("deletionGracePeriodSeconds", 0)
    return put_or_release(store, resource, obj)


def _delete_namespace(store: Store, namespace: Obj) -> Obj:
    name = namespace["metadata"]["name"]
    namespace = copy.deepcopy(namespace)
    namespace["metadata"].setdefault("deletionTimestamp", now_rfc3339())
    namespace["status"] = {"phase": "Terminating"}
    stored = store.put("namespaces", namespace)
    for resource in ("jobs", "pods", "events", "secrets", "configmaps", "serviceaccounts"):
        for obj in store.list(resource, name):
            delete_object(store, resource, name, obj["metadata"]["name"], None, "Background")
    return stored


def finish_namespace_deletions(store: Store) -> None:
    """Remove terminating namespaces once everything in them is gone."""
    for namespace in store.list("namespaces"):
        if not namespace["metadata"].get("deletionTimestamp"):
            continue
        name = namespace["metadata"]["name"]
        if not store.list("pods", name):
            for resource in ("resourcequotas", "limitranges", "events", "secrets"):
                for obj in store.list(resource, name):
                    store.remove(resource, name, obj["metadata"]["name"])
            store.remove("namespaces", "", name)


def finish_foreground_deletions(store: Store) -> None:
    """Drop the foregroundDeletion finalizer of owners whose dependents are gone."""
    for job in store.list("jobs"):
        finalizers = job["metadata"].get("finalizers") or []
        if FOREGROUND_FINALIZER in finalizers and not dependents(store, job):
            job = copy.deepcopy(job)
            job["metadata"]["finalizers"] = [f for f in finalizers if f != FOREGROUND_FINALIZER]
            put_or_release(store, "jobs", job)
