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


def _restarts(pod: Obj) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return str(sum(int(s.get("restartCount", 0)) for s in statuses))


def _readiness_gates(pod: Obj) -> str:
    gates = (pod.get("spec") or {}).get("readinessGates") or []
    if not gates:
        return "<none>"
    true = {
        c["type"]
        for c in (pod.get("status") or {}).get("conditions") or []
        if c["status"] == "True"
    }
    return f"{sum(1 for g in gates if g.get('conditionType') in true)}/{len(gates)}"


def _job_status(job: Obj) -> str:
    conditions = (job.get("status") or {}).get("conditions") or []
    true = [c["type"] for c in conditions if c["status"] == "True"]
    for name in ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet", "Suspended"):
        if name in true:
            return name
    return "Running"


def _job_duration(job: Obj) -> str:
    status = job.get("status") or {}
    if not status.get("startTime"):
        return ""
    end = parse_rfc3339(status["completionTime"]) if status.get("completionTime") else time.time()
    return human_age(end - parse_rfc3339(status["startTime"]))


def _template_containers(job: Obj, key: str) -> str:
    containers = ((job["spec"].get("template") or {}).get("spec") or {}).get("containers") or []
    return ",".join(str(c.get(key, "")) for c in containers)


def _selector(job: Obj) -> str:
    labels = ((job.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


def _node_status(node: Obj) -> str:
    conditions = (node.get("status") or {}).get("conditions") or []
    ready = [c["status"] == "True" for c in conditions if c["type"] == "Ready"]
    text = ("Ready" if ready[0] else "NotReady") if ready else "Unknown"
    return f"{text},SchedulingDisabled" if (node.get("spec") or {}).get("unschedulable") else text


def _node_address(kind: str) -> Cell:
    def cell(node: Obj) -> str:
        addresses = (node.get("status") or {}).get("addresses") or []
        return next((a["address"] for a in addresses if a.get("type") == kind), "<none>")

    return cell


def _node_info(key: str) -> Cell:
    return lambda node: ((node.get("status") or {}).get("nodeInfo") or {}).get(key) or "<unknown>"


def _status(key: str) -> Cell:
    return lambda obj: (obj.get("status") or {}).get(key) or "<none>"


def _event_object(event: Obj) -> str:
    involved = event.get("involvedObject") or {}
    return f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}"


def _event_source(event: Obj) -> str:
    source = event.get("source") or {}
    return ", ".join(str(v) for v in (source.get("component"), source.get("host")) if v)


def _stamp_age(key: str) -> Cell:
    def cell(obj: Obj) -> str:
        stamp = obj.get(key) or obj["metadata"].get("creationTimestamp")
        return human_age(time.time() - parse_rfc3339(stamp)) if stamp else "<unknown>"

    return cell


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


# (column, priority, cell): priority 1 columns are shown by `kubectl get -o wide` only
_COLUMNS: dict[str, list[tuple[str, int, Cell]]] = {
    "pods": [
        ("Name", 0, _name),
        ("Ready", 0, _pod_ready),
        ("Status", 0, _pod_status),
        ("Restarts", 0, _restarts),
        ("Age", 0, _age),
        ("IP", 1, _status("podIP")),
        ("Node", 1, lambda pod: (pod.get("spec") or {}).get("nodeName") or "<none>"),
        ("Nominated Node", 1, _status("nominatedNodeName")),
        ("Readiness Gates", 1, _readiness_gates),
    ],
    "jobs": [
        ("Name", 0, _name),
        ("Status", 0, _job_status),
        (
            "Completions",
            0,
            lambda job: (
                f"{(job.get('status') or {}).get('succeeded', 0)}/"
                f"{job['spec'].get('completions') or 1}"
            ),
        ),
        ("Duration", 0, _job_duration),
        ("Age", 0, _age),
        ("Containers", 1, lambda job: _template_containers(job, "name")),
        ("Images", 1, lambda job: _template_containers(job, "image")),
        ("Selector", 1, _selector),
    ],
    "nodes": [
        ("Name", 0, _name),
        ("Status", 0, _node_status),
        ("Roles", 0, lambda node: "<none>"),
        ("Age", 0, _age),
        (
            "Version",
            0,
            lambda node: ((node.get("status") or {}).get("nodeInfo") or {}).get(
                "kubeletVersion", ""
            ),
        ),
        ("Internal-IP", 1, _node_address("InternalIP")),
        ("External-IP", 1, _node_address("ExternalIP")),
        ("OS-Image", 1, _node_info("osImage")),
        ("Kernel-Version", 1, _node_info("kernelVersion")),
        ("Container-Runtime", 1, _node_info("containerRuntimeVersion")),
    ],
    "events": [
        ("Last Seen", 0, _stamp_age("lastTimestamp")),
        ("Type", 0, lambda event: event.get("type", "")),
        ("Reason", 0, lambda event: event.get("reason", "")),
        ("Object", 0, _event_object),
        ("Subobject", 1, lambda event: (event.get("involvedObject") or {}).get("fieldPath", "")),
        ("Source", 1, _event_source),
        ("Message", 0, lambda event: event.get("message", "")),
        ("First Seen", 1, _stamp_age("firstTimestamp")),
        ("Count", 1, lambda event: int(event.get("count") or 1)),
        ("Name", 1, _name),
    ],
    "configmaps": [
        ("Name", 0, _name),
        ("Data", 0, lambda cm: len(cm.get("data") or {}) + len(cm.get("binaryData") or {})),
        ("Age", 0, _age),
    ],
}
_DEFAULT_COLUMNS: list[tuple[str, int, Cell]] = [("Name", 0, _name), ("Age", 0, _age)]


def to_table(rt: ResourceType, payload: Obj, version: str = "v1") -> Obj:
    """A Table (`meta.k8s.io/<version>`) of one object or of a list response."""
    items = payload["items"] if "items" in payload else [payload]
    columns = _COLUMNS.get(rt.plural, _DEFAULT_COLUMNS)
    definitions = [
        {
            "name": name,
            "type": "string",
            "format": "name" if name == "Name" else "",
            "description": "",
            "priority": priority,
        }
        for name, priority, _ in columns
    ]
    rows = []
    for obj in items:
        partial = {
            "kind": "PartialObjectMetadata",
            "apiVersion": f"meta.k8s.io/{version}",
            "metadata": obj["metadata"],
        }
        rows.append({"cells": [cell(obj) for _, _, cell in columns], "object": partial})
    metadata = {"resourceVersion": payload["metadata"].get("resourceVersion", "")}
    return {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": metadata,
        "columnDefinitions": definitions,
        "rows": rows,
    }
