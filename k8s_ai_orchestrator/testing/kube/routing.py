"""Request paths and methods → (resource, namespace, name, subresource, verb).

Example:
    >>> route = parse_route("/api/v1/namespaces/ns1/pods/p1/log")
    >>> route.rt.plural, route.namespace, route.name, route.sub
    ('pods', 'ns1', 'p1', 'log')
    >>> route.verb("GET", {}), route.resource_label
    ('get', 'pods/log')
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from threading import Lock

from .resources import RESOURCES, ResourceType


@dataclass(frozen=True)
class Route:
    """Where a request points in the REST tree."""

    rt: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None

    @property
    def resource_label(self) -> str:
        """ "pods" or "pods/log": the resource as request counts name it."""
        return f"{self.rt.plural}/{self.sub}" if self.sub else self.rt.plural

    def verb(self, method: str, params: Mapping[str, str]) -> str:
        """The Kubernetes verb of an HTTP method on this route."""
        if method == "GET":
            if self.name:
                return "get"
            return "watch" if params.get("watch") in ("true", "1", "True") else "list"
        if method == "DELETE":
            return "delete" if self.name else "deletecollection"
        return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


def parse_route(path: str) -> Route | None:
    """The route of a REST path, or None for discovery and unknown paths."""
    parts = [part for part in path.split("/") if part]
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        return None
    rt = RESOURCES.get((group, rest[0]))
    if rt is None or rt.version != version or (namespace is not None and not rt.namespaced):
        return None
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    if sub is not None and sub not in rt.subresources:
        return None
    return Route(rt, namespace, name, sub)


@dataclass
class FaultRule:
    """One planned fault: `remaining` matching requests get it."""

    kind: str  # "error" | "reset" | "slow"
    remaining: int
    status: int = 500
    seconds: float = 0.0
    verb: str | None = None
    path_regex: str | None = None

    def matches(self, verb: str, path: str) -> bool:
        """Whether a request (verb, path) is subject to this fault."""
        if self.verb is not None and self.verb != verb:
            return False
        return self.path_regex is None or re.search(self.path_regex, path) is not None


class FaultPlan:
    """Faults planned for one server, consumed by matching requests in arrival order."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._rules: list[FaultRule] = []

    def add(self, rule: FaultRule) -> None:
        """Plan a fault."""
        with self._lock:
            self._rules.append(rule)

    def take(self, verb: str, path: str) -> list[FaultRule]:
        """The faults this request gets (at most one of each kind), consuming them."""
        taken: list[FaultRule] = []
        with self._lock:
            for rule in self._rules:
                if rule.remaining > 0 and rule.matches(verb, path):
                    if all(other.kind != rule.kind for other in taken):
                        rule.remaining -= 1
                        taken.append(rule)
            self._rules = [rule for rule in self._rules if rule.remaining > 0]
        return taken

    def clear(self) -> None:
        """Forget every planned fault."""
        with self._lock:
            self._rules.clear()
