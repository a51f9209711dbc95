"""Verb semantics of one API server over its store: create, read, list, update, patch, delete.

Generic over `ResourceType`; the only kind-specific parts are the defaults and validation in
`resources` and the pod admission chain passed in as `admit`.

Example:
    >>> from .store import ClusterState
    >>> api = ObjectApi(ClusterState().new_store("host"))
    >>> ns = {"metadata": {"name": "demo"}}
    >>> api.create(RESOURCES[("", "namespaces")], "", ns, {})["status"]["phase"]
    'Active'
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

from .lifecycle import delete_object, put_or_release
from .patch import APPLY_PATCH, apply_patch
from .resize import check_node_capacity, resized
from .resources import RESOURCES, ResourceType, default_object, validate_name, validate_object
from .schema import unknown_fields
from .selectors import parse_field_selector, parse_label_selector
from .store import ApiError, Obj, Store, new_uid, not_found, now_rfc3339, random_suffix
from .validation import check_decodable

Params = Mapping[str, str]
Admission = Callable[[Store, Obj], None]
_STATUS_KINDS = ("pods", "jobs", "resourcequotas", "namespaces", "nodes")
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _no_admission(store: Store, pod: Obj) -> None:
    return None


def success_status(rt: ResourceType, obj: Obj) -> Obj:
    """The Status a delete answers with once the object is gone."""
    meta = obj["metadata"]
    details = {"name": meta["name"], "group": rt.group, "kind": rt.plural, "uid": meta.get("uid")}
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def is_dry_run(options_kind: str, options: Mapping[str, Any]) -> bool:
    """Whether `dryRun` asks for a dry run; 422 Invalid for any value but "All"."""
    value = options.get("dryRun")
    values = [value] if isinstance(value, str) else list(value or [])
    if any(v != "All" for v in values):
        shown = "[" + ", ".join(f'"{v}"' for v in values) + "]"
        message = f'Unsupported value: {shown}: supported values: "All"'
        raise ApiError(
            422,
            "Invalid",
            f'{options_kind}.meta.k8s.io "" is invalid: dryRun: {message}',
            {
                "group": "meta.k8s.io",
                "kind": options_kind,
                "causes": [
                    {"reason": "FieldValueNotSupported", "message": message, "field": "dryRun"}
                ],
            },
        )
    return bool(values)


def check_fields(rt: ResourceType, body: Obj, params: Params) -> list[str]:
    """fieldValidation: Strict rejects unknown fields (400), Warn/Ignore drops them."""
    mode = params.get("fieldValidation", "Warn")
    unknown = unknown_fields(body, rt.model, prune=mode != "Strict")
    if unknown and mode == "Strict":
        listed = ", ".join(f'unknown field "{path}"' for path in unknown)
        raise ApiError(
            400,
            "BadRequest",
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
            f"strict decoding error: {listed}",
        )
    return [f'unknown field "{path}"' for path in unknown]


class ObjectApi:
    """The verbs of one API server, applied to its store (callers hold the cluster lock)."""

    def __init__(self, store: Store, admit: Admission = _no_admission) -> None:
        self.store = store
        self.admit = admit
        for name in SYSTEM_NAMESPACES:
            if store.get("namespaces", "", name) is None:
                self.create(RESOURCES[("", "namespaces")], "", {"metadata": {"name": name}}, {})

    def _require_namespace(self, rt: ResourceType, namespace: str) -> None:
        if not rt.namespaced:
            return
        found = self.store.get("namespaces", "", namespace)
        if found is None:
            raise not_found("namespaces", namespace)
        if found["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
            )

    def _check_kind(self, rt: ResourceType, body: Any) -> None:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the object provided is unrecognized")
        if body.get("kind") not in (None, "", rt.kind) or body.get("apiVersion") not in (
            None,
            "",
            rt.api_version,
        ):
            raise ApiError(
                400,
                "BadRequest",
                f"the API version in the data ({body.get('apiVersion')}) does not match the "
                f"expected API version ({rt.api_version})",
            )

    def create(self, rt: ResourceType, namespace: str, body: Any, params: Params) -> Obj:
        """POST: validate, default, admit and store a new object."""
        self._check_kind(rt, body)
        check_fields(rt, body, params)
        check_decodable(rt.kind, rt.version, body)
        obj = copy.deepcopy(body)
        obj.update(kind=rt.kind, apiVersion=rt.api_version)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + random_suffix()
        if not meta.get("name"):
            raise ApiError(422, "Invalid", f"{rt.kind}.{rt.version} is invalid: name required")
        if rt.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        validate_name(rt, meta["name"])
        validate_object(rt, obj)
        self._require_namespace(rt, meta.get("namespace", ""))
        if self.store.get(rt.plural, meta.get("namespace", ""), meta["name"]) is not None:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{rt.qualified} "{meta["name"]}" already exists',
                {"name": meta["name"], "group": rt.group, "kind": rt.plural},
            )
        meta.update(uid=new_uid(), creationTimestamp=now_rfc3339())
        for transient in ("resourceVersion", "deletionTimestamp", "selfLink"):
            meta.pop(transient, None)
        if rt.plural == "jobs":
            meta["generation"] = 1
        default_object(rt, obj)
        if rt.plural == "pods":
            self.admit(self.store, obj)
        if is_dry_run("CreateOptions", params):
            return obj
        stored = self.store.put(rt.plural, obj)
        if rt.plural == "namespaces":
            self._populate_namespace(meta["name"])
        return stored

    def _populate_namespace(self, name: str) -> None:
        account = {"metadata": {"name": "default"}}
        self.create(RESOURCES[("", "serviceaccounts")], name, account, {})
        root_ca = {"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": ""}}
        self.create(RESOURCES[("", "configmaps")], name, root_ca, {})

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        """GET one object (404 if absent)."""
        found = self.store.get(rt.plural, namespace, name)
        if found is None:
            raise not_found(rt.plural, name, rt.group)
        return found

    def select(self, rt: ResourceType, namespace: str | None, params: Params) -> Callable:
        """A predicate for namespace, labelSelector and fieldSelector (400 if unsupported)."""
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"), rt.field_getters())

        def matches(obj: Obj) -> bool:
            if namespace and obj["metadata"].get("namespace") != namespace:
                return False
            return labels(obj["metadata"].get("labels") or {}) and fields(obj)

        return matches

    def list(self, rt: ResourceType, namespace: str | None, params: Params) -> Obj:
        """GET a collection: a `<Kind>List` with the current resourceVersion."""
        matches = self.select(rt, namespace, params)
        rv, after = self.store.cluster.current_rv, None
        if params.get("continue"):  # the list's version and the key it stopped at
            rv, after = json.loads(base64.b64decode(params["continue"]))
            if rv < self.store.compacted_rv:
                raise ApiError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
        items = [
            obj
            for obj in self.store.list(rt.plural, namespace or None)
            if matches(obj) and (after is None or _key(obj) > tuple(after))
        ]
        items.sort(key=_key)
        limit = int(params.get("limit") or 0)
        page = items[:limit] if limit else items
        meta: Obj = {"resourceVersion": str(rv)}
        if limit and limit < len(items):  # the next page starts after this one's last key
            token = json.dumps([rv, _key(page[-1])]).encode()
            meta["continue"] = base64.b64encode(token).decode()
            if not params.get("labelSelector") and not params.get("fieldSelector"):
                meta["remainingItemCount"] = len(items) - limit  # unknown under a selector
        bare = [{k: v for k, v in obj.items() if k not in ("kind", "apiVersion")} for obj in page]
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": meta,
            "items": bare,
        }

    def update(
        self, rt: ResourceType, namespace: str, name: str, body: Any, params: Params, sub: str = ""
    ) -> Obj:
        """PUT: replace the object (409 on a stale resourceVersion)."""
        dry = is_dry_run("UpdateOptions", params)
        self._check_kind(rt, body)
        check_fields(rt, body, params)
        current = self.get(rt, namespace, name)
        sent_rv = (body.get("metadata") or {}).get("resourceVersion")
        if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                {"name": name, "group": rt.group, "kind": rt.plural},
            )
        return self._write(rt, current, copy.deepcopy(body), sub, dry)

    def apply(
        self, rt: ResourceType, namespace: str, name: str, body: Any, params: Params, sub: str = ""
    ) -> tuple[int, Obj]:
        """Server-side apply: creates a missing object (201), else merges into it (200).

        Field ownership is not tracked: an apply to an existing object is a strategic merge.
        """
        if not params.get("fieldManager"):
            message = "Required value: is required for apply patch"
            raise ApiError(
                422,
                "Invalid",
                f'PatchOptions.meta.k8s.io "" is invalid: fieldManager: {message}',
                {
                    "group": "meta.k8s.io",
                    "kind": "PatchOptions",
                    "causes": [
                        {
                            "reason": "FieldValueRequired",
                            "message": message,
                            "field": "fieldManager",
                        }
                    ],
                },
            )
        given = ((body or {}).get("metadata") or {}).get("name") if isinstance(body, dict) else None
        if given and given != name:
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({given}) does not match the name on the URL ({name})",
            )
        if self.store.get(rt.plural, namespace, name) is None and not sub:
            created = {**body, "metadata": {**(body.get("metadata") or {}), "name": name}}
            return 201, self.create(rt, namespace, created, params)
        return 200, self.patch(rt, namespace, name, body, APPLY_PATCH, sub, params)

    def patch(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        sub: str,
        params: Params,
    ) -> Obj:
        """PATCH with the flavour named by the Content-Type."""
        dry = is_dry_run("PatchOptions", params)
        current = self.get(rt, namespace, name)
        patched = apply_patch(current, body, content_type)
        if not isinstance(patched, dict):
            raise ApiError(422, "Invalid", "the patch did not produce an object")
        sent_rv = (patched.get("metadata") or {}).get("resourceVersion")
        if sent_rv and sent_rv != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409, "Conflict", f'Operation cannot be fulfilled on {rt.qualified} "{name}"'
            )
        return self._write(rt, current, patched, sub, dry)

    def _write(self, rt: ResourceType, current: Obj, new: Obj, sub: str, dry: bool) -> Obj:
        if sub == "resize":
            new = resized(rt, current, new)
            node = new["spec"].get("nodeName")
            if new["metadata"].get("generation") != current["metadata"].get("generation"):
                check_node_capacity(new, self.store.get("nodes", "", node) if node else None)
        elif sub == "status":
            merged = copy.deepcopy(current)
            merged["status"] = new.get("status") or {}
            new = merged
        elif rt.plural in _STATUS_KINDS and "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        meta = new.setdefault("metadata", {})
        kept = ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp", "generation")
        for key in kept:
            if key in current["metadata"]:
                meta[key] = current["metadata"][key]
        if rt.plural == "jobs" and new.get("spec") != current.get("spec"):
            meta["generation"] = current["metadata"].get("generation", 1) + 1
        new.update(kind=rt.kind, apiVersion=rt.api_version)
        check_decodable(rt.kind, rt.version, new)
        validate_object(rt, new)
        if dry:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
            return new
        return put_or_release(self.store, rt.plural, new)

    def delete(self, rt: ResourceType, namespace: str, name: str, options: Obj) -> Obj:
        """Returns the object for pods and pending deletions, a Success Status otherwise."""
        current = self.get(rt, namespace, name)
        if is_dry_run("DeleteOptions", options):
            return current if rt.plural == "pods" else success_status(rt, current)
        grace = options.get("gracePeriodSeconds")
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        result = delete_object(self.store, rt.plural, namespace, name, grace, policy)
        still_there = self.store.get(rt.plural, namespace, name) is not None
        if rt.plural == "pods" or still_there:
            return result
        return success_status(rt, result)

    def delete_collection(
        self, rt: ResourceType, namespace: str | None, params: Params, options: Obj
    ) -> Obj:
        """DELETE a collection: delete each matching object."""
        listed = self.list(rt, namespace, params)
        if is_dry_run("DeleteOptions", options):
            return listed
        for item in listed["items"]:
            meta = item["metadata"]
            self.delete(rt, meta.get("namespace", ""), meta["name"], options)
        return listed


def _key(obj: Obj) -> tuple[str, str]:
    """Where an object sorts in a list: namespace, then name (a continue token names one)."""
    return (obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
