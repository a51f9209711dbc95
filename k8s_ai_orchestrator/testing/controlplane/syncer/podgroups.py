"""PodGroups (`scheduling.k8s.io/v1beta1`, gang scheduling) from a tenant to the host.

The host scheduler gangs host pods, so a tenant's PodGroup must exist on the host, where the
tenant's pods are: it is copied into `vcluster-<tenant>` under the translated name
(`<name>-x-<namespace>-x-<tenant>`) with its policy, its PriorityClass translated as the pods'
is, and without owner references (the owner, a Job, stays in the tenant). The host pods'
`spec.schedulingGroup.podGroupName` is translated the same way (`translate.host_pod`). A host
copy whose tenant PodGroup is gone is deleted (`sync`, once per pass of the syncer). Only a
tenant whose API server serves PodGroups (`served`) is synced.

Example:
    >>> tenant_group = {"metadata": {"name": "g", "namespace": "default", "uid": "u1"},
    ...     "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    >>> host_podgroup(tenant_group, "team-a", "vcluster-team-a")["metadata"]["name"]
    'g-x-default-x-team-a'
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from kubernetes import client

from ....backends.kubernetes.podgroups import GROUP, PLURAL, VERSION
from ....backends.kubernetes.podgroups import serves_podgroups as served
from ..informer import Informer
from ..patches import ignoring
from . import translate

Obj = dict[str, Any]


def lister(api_client: client.ApiClient, namespace: str | None = None) -> Callable[..., Any]:
    """A `list_*`-shaped function over PodGroups that an `Informer` can list and watch."""
    custom = client.CustomObjectsApi(api_client)

    def list_podgroups(**kwargs: Any) -> Any:
        if namespace is None:
            answer = custom.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)
        else:
            answer = custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, **kwargs
            )
        if kwargs.get("watch"):
            return answer
        meta = SimpleNamespace(resource_version=answer["metadata"].get("resourceVersion"))
        return SimpleNamespace(items=answer["items"], metadata=meta)

    return list_podgroups


def host_podgroup(group: Obj, tenant: str, host_namespace: str) -> Obj:
    """The host copy of a tenant PodGroup."""
    meta = group["metadata"]
    namespace = meta["namespace"]
    spec = copy.deepcopy(group.get("spec") or {})
    for field in ("workloadRef", "priority"):
        spec.pop(field, None)
    if spec.get("priorityClassName"):
        spec["priorityClassName"] = translate.host_priority_class(
            spec["priorityClassName"], host_namespace, tenant
        )
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {
            "name": translate.host_name(meta["name"], namespace, tenant),
            "namespace": host_namespace,
            "labels": {translate.MANAGED_BY: tenant, translate.NAMESPACE_LABEL: namespace},
            "annotations": {
                translate.OBJECT_NAME: meta["name"],
                translate.OBJECT_NAMESPACE: namespace,
                translate.OBJECT_UID: meta["uid"],
                translate.OBJECT_KIND: f"{GROUP}/{VERSION}, Kind=PodGroup",
            },
        },
        "spec": spec,
    }


def sync(
    host_api: client.ApiClient,
    tenant_groups: list[Obj],
    host_groups: Informer,
    tenant: str,
    host_namespace: str,
    copy_priority_class: Callable[[str], None],
) -> None:
    """Copy new tenant PodGroups (with their PriorityClass) to the host namespace; delete
    host copies whose original is gone."""
    custom = client.CustomObjectsApi(host_api)
    wanted = {}
    for group in tenant_groups:
        body = host_podgroup(group, tenant, host_namespace)
        wanted[body["metadata"]["name"]] = group["metadata"]["uid"]
        if host_groups.get(host_namespace, body["metadata"]["name"]) is not None:
            continue
        priority = (group.get("spec") or {}).get("priorityClassName")
        if priority:
            copy_priority_class(priority)
        with ignoring(409):
            created = custom.create_namespaced_custom_object(
                GROUP, VERSION, host_namespace, PLURAL, body
            )
            host_groups.update(created)
    for host in host_groups.items():
        meta = host["metadata"]
        uid = (meta.get("annotations") or {}).get(translate.OBJECT_UID)
        if wanted.get(meta["name"]) != uid and not meta.get("deletionTimestamp"):
            with ignoring(404, 409):
                custom.delete_namespaced_custom_object(
                    GROUP, VERSION, host_namespace, PLURAL, meta["name"]
                )


__all__ = ["GROUP", "PLURAL", "VERSION", "host_podgroup", "lister", "served", "sync"]
