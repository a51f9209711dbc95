"""Discovery documents: /version, /api, /apis, /api/v1, /apis/<group>/<version>.

Enough for `kubectl get pods` and for clients that discover served resources.

Example:
    >>> document("/api")["versions"]
    ['v1']
"""

from __future__ import annotations

from .resources import GROUPS, RESOURCES
from .store import Obj

VERSION = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.2-emulator",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-11-01T00:00:00Z",
    "goVersion": "go1.26.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _group_entry(group: str, version: str) -> Obj:
    group_version = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [group_version], "preferredVersion": group_version}


_SUBRESOURCE_VERBS = {"log": ["get"], "eviction": ["create"], "binding": ["create"]}
_SUBRESOURCE_KINDS = {"log": "Pod", "eviction": "Eviction", "binding": "Binding"}


def _subresource_entry(plural: str, kind: str, namespaced: bool, sub: str) -> Obj:
    return {
        "name": f"{plural}/{sub}",
        "singularName": "",
        "namespaced": namespaced,
        "kind": _SUBRESOURCE_KINDS.get(sub, kind),
        "verbs": _SUBRESOURCE_VERBS.get(sub, ["get", "patch", "update"]),
    }


def _resource_list(group: str, version: str) -> Obj:
    resources = []
    for (rt_group, _), rt in sorted(RESOURCES.items()):
        if rt_group != group:
            continue
        resources.append(
            {
                "name": rt.plural,
                "singularName": rt.kind.lower(),
                "namespaced": rt.namespaced,
                "kind": rt.kind,
                "verbs": list(rt.verbs),
                **({"shortNames": list(rt.short_names)} if rt.short_names else {}),
                **({"categories": list(rt.categories)} if rt.categories else {}),
            }
        )
        for sub in rt.subresources:
            resources.append(_subresource_entry(rt.plural, rt.kind, rt.namespaced, sub))
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": resources,
    }


def document(path: str) -> Obj | None:
    """The discovery document served at `path`, or None if it is not a discovery path."""
    path = path.rstrip("/")
    if path == "/version":
        return VERSION
    if path == "/api":
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if path == "/apis":
        groups = [_group_entry(g, v) for g, v in sorted(GROUPS.items()) if g]
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
    if path == "/api/v1":
        return _resource_list("", "v1")
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in GROUPS:
        return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(parts[1], GROUPS[parts[1]])}
    if len(parts) == 3 and parts[0] == "apis" and GROUPS.get(parts[1]) == parts[2]:
        return _resource_list(parts[1], parts[2])
    return None
