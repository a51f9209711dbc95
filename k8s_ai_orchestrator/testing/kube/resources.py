"""The resource kinds the emulator serves, their discovery data, defaults and validation.

Everything kind-specific that is not a controller lives here as data plus small functions;
the API layer itself is generic over `ResourceType`.

Example:
    >>> RESOURCES[("batch", "jobs")].api_version, RESOURCES[("", "pods")].kind
    ('batch/v1', 'Pod')
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .store import ApiError, Obj
from .validation import (
    DNS_LABEL_HELP,
    SUBDOMAIN_HELP,
    config_key_causes,
    container_causes,
    metadata_causes,
)

FieldGetter = Callable[[Obj], str]
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


def _path(*keys: str) -> FieldGetter:
    def get(obj: Obj) -> str:
        node: Any = obj
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, bool):
            return "true" if node else "false"
        return "" if node is None else str(node)

    return get


_META_FIELDS: dict[str, FieldGetter] = {
    "metadata.name": _path("metadata", "name"),
    "metadata.namespace": _path("metadata", "namespace"),
}


@dataclass(frozen=True)
class ResourceType:
    """One served resource (a plural name in one API group/version)."""

    plural: str
    kind: str
    group: str  # "" for the core group
    version: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    fields: dict[str, FieldGetter] = field(default_factory=dict)  # field selector labels
    categories: tuple[str, ...] = ()  # discovery categories: "all" for `kubectl get all`

    @property
    def api_version(self) -> str:
        """ "v1" or "<group>/<version>"."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def model(self) -> str:
        """Name of the official client's model class, e.g. "V1Pod"."""
        return f"{self.version.capitalize()}{self.kind}"

    @property
    def qualified(self) -> str:
        """`jobs.batch` style name used in error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def field_getters(self) -> dict[str, FieldGetter]:
        """Field selector labels this resource supports."""
        return {**_META_FIELDS, **self.fields}


def _rt(*args: Any, **kwargs: Any) -> ResourceType:
    return ResourceType(*args, **kwargs)


_POD_FIELDS = {
    "status.phase": _path("status", "phase"),
    "spec.nodeName": _path("spec", "nodeName"),
    "spec.restartPolicy": _path("spec", "restartPolicy"),
    "spec.schedulerName": _path("spec", "schedulerName"),
    "spec.serviceAccountName": _path("spec", "serviceAccountName"),
    "status.podIP": _path("status", "podIP"),
    "status.nominatedNodeName": _path("status", "nominatedNodeName"),
}
_EVENT_FIELDS = {
    f"involvedObject.{key}": _path("involvedObject", key)
    for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
}
_EVENT_FIELDS.update(
    {
        "reason": _path("reason"),
        "type": _path("type"),
        "source": _path("source", "component"),
        "reportingComponent": _path("reportingComponent"),
    }
)

_TYPES = [
    _rt(
        "namespaces",
        "Namespace",
        "",
        "v1",
        False,
        ("ns",),
        ("status", "finalize"),
        verbs=tuple(verb for verb in ALL_VERBS if verb != "deletecollection"),
        fields={"status.phase": _path("status", "phase")},
    ),
    _rt(
        "pods",
        "Pod",
        "",
        "v1",
        True,
        ("po",),
        ("status", "log", "eviction", "binding", "resize"),
        fields=_POD_FIELDS,
        categories=("all",),
    ),
    _rt("events", "Event", "", "v1", True, ("ev",), fields=_EVENT_FIELDS),
    _rt("secrets", "Secret", "", "v1", True, fields={"type": _path("type")}),
    _rt("configmaps", "ConfigMap", "", "v1", True, ("cm",)),
    _rt("serviceaccounts", "ServiceAccount", "", "v1", True, ("sa",)),
    _rt("resourcequotas", "ResourceQuota", "", "v1", True, ("quota",), ("status",)),
    _rt("limitranges", "LimitRange", "", "v1", True, ("limits",)),
    _rt(
        "nodes",
        "Node",
        "",
        "v1",
        False,
        ("no",),
        ("status",),
        fields={"spec.unschedulable": _path("spec", "unschedulable")},
    ),
    _rt(
        "jobs",
        "Job",
        "batch",
        "v1",
        True,
        (),
        ("status",),
        fields={"status.successful": _path("status", "succeeded")},
        categories=("all",),
    ),
    _rt("priorityclasses", "PriorityClass", "scheduling.k8s.io", "v1", False, ("pc",)),
    _rt(
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        "authorization.k8s.io",
        "v1",
        False,
        verbs=("create",),
    ),
]

RESOURCES: dict[tuple[str, str], ResourceType] = {(t.group, t.plural): t for t in _TYPES}
GROUPS: dict[str, str] = {t.group: t.version for t in _TYPES}


def resource(group: str, plural: str) -> ResourceType:
    """The ResourceType of (group, plural)."""
    return RESOURCES[(group, plural)]


_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid with the real message shape; causes are (field, reason, message)."""
    text = "; ".join(f"{path}: {message}" for path, _, message in causes)
    if len(causes) > 1:
        text = "[" + ", ".join(f"{path}: {message}" for path, _, message in causes) + "]"
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return ApiError(
        422,
        "Invalid",
        f'{kind} "{name}" is invalid: {text}',
        {
            "name": name,
            "group": rt.group,
            "kind": rt.kind,
            "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes],
        },
    )


def validate_name(rt: ResourceType, name: str) -> None:
    """422 Invalid unless the name is a DNS subdomain (a DNS label for namespaces and jobs)."""
    label_only = rt.plural in ("namespaces", "jobs")
    pattern, help_text = (_LABEL, DNS_LABEL_HELP) if label_only else (_SUBDOMAIN, SUBDOMAIN_HELP)
    if not pattern.fullmatch(name) or len(name) > (63 if label_only else 253):
        cause = ("metadata.name", "FieldValueInvalid", f'Invalid value: "{name}": {help_text}')
        raise invalid(rt, name, [cause])


def _pod_spec_causes(spec: Obj, prefix: str) -> list[tuple[str, str, str]]:
    containers = spec.get("containers") or []
    if not containers:
        return [(f"{prefix}.containers", "FieldValueRequired", "Required value")]
    causes = []
    for index, container in enumerate(containers):
        where = f"{prefix}.containers[{index}]"
        if not container.get("name"):
            causes.append((f"{where}.name", "FieldValueRequired", "Required value"))
        if not container.get("image"):
            causes.append((f"{where}.image", "FieldValueRequired", "Required value"))
        causes += container_causes(container, where)
    return causes


def validate_object(rt: ResourceType, obj: Obj) -> None:
    """Metadata, required fields and the pod spec's names and amounts; raises 422 Invalid."""
    name = obj["metadata"]["name"]
    causes = metadata_causes(obj["metadata"])
    if rt.plural == "pods":
        causes += _pod_spec_causes(obj.get("spec") or {}, "spec")
    elif rt.plural == "jobs":
        template_spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        causes += _pod_spec_causes(template_spec, "spec.template.spec")
        policy = template_spec.get("restartPolicy")
        if (obj.get("spec") or {}).get("podFailurePolicy") and policy == "OnFailure":
            message = (
                'Invalid value: "OnFailure": only "Never" is supported when podFailurePolicy '
                "is specified"
            )
            causes.append(("spec.template.spec.restartPolicy", "FieldValueInvalid", message))
        elif policy not in ("Never", "OnFailure"):
            message = 'Required value: valid values: "OnFailure", "Never"'
            if policy:
                message = f'Unsupported value: "{policy}": supported values: "OnFailure", "Never"'
            causes.append(("spec.template.spec.restartPolicy", "FieldValueRequired", message))
    elif rt.plural == "priorityclasses" and "value" not in obj:
        causes.append(("value", "FieldValueRequired", "Required value"))
    elif rt.plural in ("configmaps", "secrets"):
        causes += config_key_causes(obj)
    if causes:
        raise invalid(rt, name, causes)


def _default_container(container: Obj) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("resources", {})
    image = str(container.get("image", ""))
    tagged = ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
    container.setdefault("imagePullPolicy", "IfNotPresent" if tagged else "Always")


def default_pod_spec(spec: Obj) -> None:
    """Pod spec defaults the API server fills in."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("enableServiceLinks", True)
    for container in spec.get("containers") or []:
        _default_container(container)
    for container in spec.get("initContainers") or []:
        _default_container(container)


def default_object(rt: ResourceType, obj: Obj) -> None:
    """Defaults the API server fills in on create."""
    if rt.plural == "pods":
        default_pod_spec(obj.setdefault("spec", {}))
        obj["spec"].setdefault("preemptionPolicy", "PreemptLowerPriority")
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj["spec"])}
    elif rt.plural == "jobs":
        default_job(obj)
    elif rt.plural == "secrets":
        obj.setdefault("type", "Opaque")
        string_data = obj.pop("stringData", None) or {}
        data = obj.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()
    elif rt.plural == "namespaces":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj["status"] = {"phase": "Active"}
        labels = obj["metadata"].setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = obj["metadata"]["name"]
    elif rt.plural == "priorityclasses":
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    elif rt.plural == "resourcequotas":
        obj["status"] = {"hard": dict((obj.get("spec") or {}).get("hard") or {}), "used": {}}


def default_job(job: Obj) -> None:
    """Job defaults: completions, parallelism, backoffLimit, selector and template labels."""
    spec = job.setdefault("spec", {})
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    spec.setdefault("parallelism", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("manualSelector", False)
    # with a podFailurePolicy, replacements wait until the old pod is fully terminated
    spec.setdefault(
        "podReplacementPolicy", "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    )
    uid = job["metadata"]["uid"]
    name = job["metadata"]["name"]
    selector_labels = {"batch.kubernetes.io/controller-uid": uid}
    spec.setdefault("selector", {"matchLabels": selector_labels})
    template = spec.setdefault("template", {})
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels.update(
        {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        }
    )
    default_pod_spec(template.setdefault("spec", {}))
    job["status"] = {}


def qos_class(spec: Obj) -> str:
    """BestEffort, Burstable or Guaranteed, from the containers' resources."""
    containers = spec.get("containers") or []
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        if not {"cpu", "memory"} <= limits.keys():
            return "Burstable"
        if any(requests.get(k, limits[k]) != limits[k] for k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"
