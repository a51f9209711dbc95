"""How a tenant's pod looks on the host: vCluster's names, labels and annotations.

vCluster in its default single-namespace mode puts every tenant pod into the host namespace
the vCluster runs in (`vcluster-<tenant>` in our layout), named `<name>-x-<namespace>-x-<vc>`
(cut to 52 characters plus a hash when longer than 63), with annotations naming the virtual
object and the label `vcluster.loft.sh/managed-by`. Secrets and config maps the pod
references are copied under the same naming; PriorityClasses (synced to the host in our
recommended values) are named `vcluster-<name>-x-<namespace>-x-<vc>`.

Example:
    >>> host_name("train-0", "default", "team-a")
    'train-0-x-default-x-team-a'
    >>> len(host_name("a" * 60, "default", "team-a"))
    63
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

Obj = dict[str, Any]
MANAGED_BY = "vcluster.loft.sh/managed-by"
NAMESPACE_LABEL = "vcluster.loft.sh/namespace"
OBJECT_NAME = "vcluster.loft.sh/object-name"
OBJECT_NAMESPACE = "vcluster.loft.sh/object-namespace"
OBJECT_UID = "vcluster.loft.sh/object-uid"
OBJECT_KIND = "vcluster.loft.sh/object-kind"
_TOKEN_VOLUME = "kube-api-access-"


def safe_concat(*parts: str) -> str:
    """Join with '-'; names over 63 characters keep 52 and add a 10-character hash."""
    full = "-".join(parts)
    if len(full) <= 63:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()
    return full[:52].rstrip("-") + "-" + digest[:10]


def host_name(name: str, namespace: str, tenant: str) -> str:
    """The host name of a namespaced tenant object."""
    return safe_concat(name, "x", namespace, "x", tenant)


def host_priority_class(name: str, host_namespace: str, tenant: str) -> str:
    """The host name of a tenant PriorityClass (cluster-scoped)."""
    return safe_concat("vcluster", name, "x", host_namespace, "x", tenant)


def referenced(pod: Obj) -> set[tuple[str, str]]:
    """(kind, name) of the secrets and config maps the pod's environment and volumes read."""
    found: set[tuple[str, str]] = set()
    for volume in pod["spec"].get("volumes") or []:
        if "secret" in volume:
            found.add(("Secret", volume["secret"]["secretName"]))
        if "configMap" in volume:
            found.add(("ConfigMap", volume["configMap"]["name"]))
    for container in pod["spec"].get("containers") or []:
        for source in container.get("envFrom") or []:
            for key, kind in (("secretRef", "Secret"), ("configMapRef", "ConfigMap")):
                if key in source:
                    found.add((kind, source[key]["name"]))
        for var in container.get("env") or []:
            value_from = var.get("valueFrom") or {}
            for key, kind in (("secretKeyRef", "Secret"), ("configMapKeyRef", "ConfigMap")):
                if key in value_from:
                    found.add((kind, value_from[key]["name"]))
    return found


def _rewrite_env(container: Obj, namespace: str, tenant: str) -> None:
    for source in container.get("envFrom") or []:
        for key in ("secretRef", "configMapRef"):
            if key in source:
                source[key]["name"] = host_name(source[key]["name"], namespace, tenant)
    for var in container.get("env") or []:
        value_from = var.get("valueFrom") or {}
        for key in ("secretKeyRef", "configMapKeyRef"):
            if key in value_from:
                value_from[key]["name"] = host_name(value_from[key]["name"], namespace, tenant)
        field = value_from.get("fieldRef")
        if field and field.get("fieldPath") in ("metadata.name", "metadata.namespace"):
            annotation = OBJECT_NAME if field["fieldPath"].endswith("name") else OBJECT_NAMESPACE
            field["fieldPath"] = f"metadata.annotations['{annotation}']"


def _rewrite_volumes(spec: Obj, namespace: str, tenant: str) -> None:
    """Drop the tenant's service-account token volume; point secret/configMap volumes at
    their host copies."""
    token = {v["name"] for v in spec.get("volumes") or [] if v["name"].startswith(_TOKEN_VOLUME)}
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v["name"] not in token]
    for volume in spec["volumes"]:
        if "secret" in volume:
            volume["secret"]["secretName"] = host_name(
                volume["secret"]["secretName"], namespace, tenant
            )
        if "configMap" in volume:
            volume["configMap"]["name"] = host_name(volume["configMap"]["name"], namespace, tenant)
    if not spec["volumes"]:
        del spec["volumes"]
    for container in spec.get("containers") or []:
        mounts = [m for m in container.get("volumeMounts") or [] if m["name"] not in token]
        container["volumeMounts"] = mounts
        if not mounts:
            del container["volumeMounts"]


def host_pod(pod: Obj, tenant: str, host_namespace: str, priority_synced: bool) -> Obj:
    """The host pod the syncer creates for a tenant pod."""
    meta = pod["metadata"]
    namespace = meta["namespace"]
    spec = copy.deepcopy(pod["spec"])
    for field in ("serviceAccountName", "serviceAccount", "priority"):  # nodeName is kept
        spec.pop(field, None)
    spec["automountServiceAccountToken"] = False
    _rewrite_volumes(spec, namespace, tenant)
    if spec.get("priorityClassName"):
        if priority_synced:
            spec["priorityClassName"] = host_priority_class(
                spec["priorityClassName"], host_namespace, tenant
            )
        else:
            spec.pop("priorityClassName")
    for container in spec.get("containers") or []:
        _rewrite_env(container, namespace, tenant)
    _scope_affinity(spec, namespace, tenant)
    # vCluster's syncer (v0.34) builds on Kubernetes types that predate `schedulingGroup`: the
    # host pod joins no PodGroup (and none is copied), so a tenant's gang is not one on the host
    spec.pop("schedulingGroup", None)
    labels = {**(meta.get("labels") or {}), MANAGED_BY: tenant, NAMESPACE_LABEL: namespace}
    annotations = {
        **(meta.get("annotations") or {}),
        OBJECT_NAME: meta["name"],
        OBJECT_NAMESPACE: namespace,
        OBJECT_UID: meta["uid"],
        OBJECT_KIND: "/v1, Kind=Pod",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": host_name(meta["name"], namespace, tenant),
            "namespace": host_namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
    }


def _scope_affinity(spec: Obj, namespace: str, tenant: str) -> None:
    """Pod (anti-)affinity terms of the pod's own namespace match only its namespace's pods.

    On the host every namespace of the tenant shares one namespace, so each term's selector
    also requires the host labels of the tenant and the pod's namespace, as vCluster does.

    Example:
        >>> term = {"labelSelector": {"matchLabels": {"job": "j"}}, "topologyKey": "h"}
        >>> anti = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
        >>> _scope_affinity({"affinity": {"podAntiAffinity": anti}}, "default", "team-a")
        >>> sorted(term["labelSelector"]["matchLabels"].items())  # doctest: +NORMALIZE_WHITESPACE
        [('job', 'j'), ('vcluster.loft.sh/managed-by', 'team-a'),
         ('vcluster.loft.sh/namespace', 'default')]
    """
    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = affinity.get(kind) or {}
        terms = list(rules.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [
            weighted.get("podAffinityTerm") or {}
            for weighted in rules.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        for term in terms:
            if term.get("namespaces") or term.get("namespaceSelector") is not None:
                continue  # other namespaces: left as they are
            selector = term.setdefault("labelSelector", {})
            selector.setdefault("matchLabels", {}).update(
                {MANAGED_BY: tenant, NAMESPACE_LABEL: namespace}
            )


def host_copy(obj: Obj, kind: str, tenant: str, host_namespace: str) -> Obj:
    """The host copy of a tenant secret or config map."""
    meta = obj["metadata"]
    body: Obj = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {
            "name": host_name(meta["name"], meta["namespace"], tenant),
            "namespace": host_namespace,
            "labels": {MANAGED_BY: tenant, NAMESPACE_LABEL: meta["namespace"]},
            "annotations": {OBJECT_NAME: meta["name"], OBJECT_NAMESPACE: meta["namespace"]},
        },
    }
    for field in ("data", "stringData", "binaryData", "type"):
        if obj.get(field) is not None:
            body[field] = obj[field]
    return body


STATUS_FIELDS = (
    "phase",
    "conditions",
    "containerStatuses",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "startTime",
    "reason",
    "message",
    "nominatedNodeName",
)


def tenant_status(host: Obj) -> Obj:
    """The part of a host pod's status the tenant pod shows."""
    status = host.get("status") or {}
    return {k: copy.deepcopy(status[k]) for k in STATUS_FIELDS if status.get(k) is not None}
