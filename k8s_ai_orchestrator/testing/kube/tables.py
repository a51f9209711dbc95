"""Server-side printing: the `meta.k8s.io/v1` Table that `kubectl get` asks for.

Example:
    >>> human_age(75), human_age(600), human_age(4000)
    ('75s', '10m', '66m')
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .resources import ResourceType
from .store import Obj, parse_rfc3339

Cell = Callable[[Obj], Any]


def human_age(seconds: float) -> str:
    """kubectl's short durations: 75s, 3m20s, 10m, 5h, 3d."""
    seconds = int(max(seconds, 0))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    return f"{hours}h" if hours < 48 else f"{hours // 24}d"


def _age(obj: Obj) -> str:
    stamp = obj["metadata"].get("creationTimestamp")
    return human_age(time.time() - parse_rfc3339(stamp)) if stamp else "<unknown>"


def _pod_status(pod: Obj) -> str:
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") and status.get("phase") not in (
        "Failed",
        "Succeeded",
    ):
        return "Terminating"
    for container in status.get("containerStatuses") or []:
        state = container.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason") != "ContainerCreating":
            return str(state["waiting"]["reason"])
        if "terminated" in state and status.get("phase") != "Running":
            return str(state["terminated"].get("reason", "Error"))
    return str(status.get("reason") or status.get("phase", "Pending"))


def _pod_ready(pod: Obj) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    return f"{ready}/{len(pod['spec']['containers'])}"


def _restarts(pod: Obj) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount", 0)) for s in statuses)


def _job_status(job: Obj) -> str:
    conditions = (job.get("status") or {}).get("conditions") or []
    true = [c["type"] for c in conditions if c["status"] == "True"]
    for name in ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "Suspended"):
        if name in true:
            return name
    return "Running"


def _node_status(node: Obj) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    text = "Ready" if ready else "NotReady"
    return f"{text},SchedulingDisabled" if (node.get("spec") or {}).get("unschedulable") else text


_COLUMNS: dict[str, list[tuple[str, Cell]]] = {
    "pods": [
        ("Ready", _pod_ready),
        ("Status", _pod_status),
        ("Restarts", _restarts),
        ("Node", lambda pod: (pod.get("spec") or {}).get("nodeName") or "<none>"),
    ],
    "jobs": [
        ("Status", _job_status),
        (
            "Completions",
            lambda job: (
                f"{(job.get('status') or {}).get('succeeded', 0)}/"
                f"{job['spec'].get('completions') or 1}"
            ),
        ),
    ],
    "nodes": [("Status", _node_status), ("Roles", lambda node: "<none>")],
    "events": [
        ("Type", lambda event: event.get("type", "")),
        ("Reason", lambda event: event.get("reason", "")),
        ("Message", lambda event: event.get("message", "")),
    ],
}


def to_table(rt: ResourceType, payload: Obj) -> Obj:
    """A Table of one object or of a list response."""
    items = payload["items"] if "items" in payload else [payload]
    extra = _COLUMNS.get(rt.plural, [])
    names = ["Name", *[name for name, _ in extra], "Age"]
    definitions = [
        {
            "name": name,
            "type": "string",
            "format": "name" if name == "Name" else "",
            "description": "",
            "priority": 0,
        }
        for name in names
    ]
    rows = []
    for obj in items:
        cells = [obj["metadata"]["name"], *[cell(obj) for _, cell in extra], _age(obj)]
        partial = {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": obj["metadata"],
        }
        rows.append({"cells": cells, "object": partial})
    metadata = {"resourceVersion": payload["metadata"].get("resourceVersion", "")}
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    }
