"""Small idempotent steps on API objects, for the launchers that install a component's objects
into a plane (Kueue, Karpenter): create unless present, create or replace, delete unless gone,
and a readiness probe for CRDs.

Example:
    >>> created = []
    >>> create_if_absent(created.append, {"metadata": {"name": "a"}})
    >>> created
    [{'metadata': {'name': 'a'}}]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

Obj = dict[str, Any]


def not_established(extensions: client.ApiextensionsV1Api, names: Iterable[str]) -> str | None:
    """A readiness probe: None once every CRD named is Established, else the first that is not."""
    for name in names:
        crd = extensions.read_custom_resource_definition(name)
        conditions = {c.type: c.status for c in crd.status.conditions or []}
        if conditions.get("Established") != "True":
            return f"CRD {name} is not Established"
    return None


def create_if_absent(create: Callable[[Obj], Any], body: Obj) -> None:
    """Create, or leave the existing object as it is."""
    try:
        create(body)
    except ApiException as error:
        if error.status != 409:
            raise


def create_or_replace(api: Any, kind: str, body: Obj) -> None:
    """Create the cluster-scoped object, or replace the existing one with `body` (this start's
    ports), through `api`'s `create_<kind>`, `read_<kind>` and `replace_<kind>`."""
    try:
        getattr(api, f"create_{kind}")(body)
        return
    except ApiException as error:
        if error.status != 409:
            raise
    name = body["metadata"]["name"]
    version = getattr(api, f"read_{kind}")(name).metadata.resource_version
    metadata = {**body["metadata"], "resourceVersion": version}
    getattr(api, f"replace_{kind}")(name, {**body, "metadata": metadata})


def delete_if_present(delete: Callable[[str], Any], name: str) -> None:
    """Call `delete(name)`; an object already gone (404) is fine."""
    try:
        delete(name)
    except ApiException as error:
        if error.status != 404:
            raise
