"""Who preempted a step: the scheduler's `Preempted` event names the preemptor's pod UID.

The scheduler records `Preempted by pod <uid> on node <node>` on each victim pod. When the
preemptor is a pod of the same tenant namespace (a gang or a standard GPU step of this or
another run), its annotations name the step and run; otherwise only the UID is known (a pod
of another tenant or namespace, which this tenant cannot see).

Example:
    >>> preemptor_uid("Preempted by pod 6f1c-22 on node node-b")
    ('6f1c-22', 'node-b')
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

_PREEMPTED = re.compile(r"Preempted by pod (?P<uid>\S+) on node (?P<node>\S+)")
RUN_ANNOTATION = "k8s-ai/run-id"
STEP_ANNOTATION = "k8s-ai/step-key"


def preemptor_uid(message: str) -> tuple[str, str] | None:
    """(preemptor UID, node) from a `Preempted` event message, if it is one."""
    found = _PREEMPTED.search(message)
    return (found.group("uid"), found.group("node")) if found else None


def who_preempted(core: CoreV1Api, namespace: str, victim: str) -> str | None:
    """ "preempted by step 'train' of run 'r1' (pod p) on node-b", or None if unknown."""
    try:
        events = core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={victim}"
        ).items
    except ApiException:
        return None
    parsed = [preemptor_uid(e.message or "") for e in events if e.reason == "Preempted"]
    found = [pair for pair in parsed if pair is not None]
    if not found:
        return None
    uid, node = found[-1]
    return f"preempted by {_describe_pod(core, namespace, uid)} on {node}"


def _describe_pod(core: CoreV1Api, namespace: str, uid: str) -> str:
    try:
        pods: list[Any] = core.list_namespaced_pod(namespace).items
    except ApiException:
        pods = []
    return describe_uid(pods, uid, "pod", namespace)


def describe_uid(objects: Iterable[Any], uid: str, kind: str, namespace: str) -> str:
    """ "step 'train' of run 'r1' (<kind> <name>)" for the object (a kubernetes-client model
    carrying the backend's annotations) with `uid`, or what is known of it.

    Example:
        >>> describe_uid([], "6f1c", "Job", "default")
        "Job 6f1c (not in namespace 'default')"
    """
    for found in objects:
        if found.metadata.uid == uid:
            notes = found.metadata.annotations or {}
            if STEP_ANNOTATION in notes:
                return (
                    f"step '{notes[STEP_ANNOTATION]}' of run '{notes.get(RUN_ANNOTATION, '?')}' "
                    f"({kind} {found.metadata.name})"
                )
            return f"{kind} {found.metadata.name}"
    return f"{kind} {uid} (not in namespace '{namespace}')"
