"""The three PATCH flavours: JSON merge patch, strategic merge patch and JSON patch.

Strategic merge covers the common cases: lists of containers, env, ports, volumes,
conditions and ownerReferences merge by their key; finalizers merge as a set; `null` deletes
a field; `{"$patch": "delete"}` in a keyed list removes that item.

Example:
    >>> old = {"env": [{"name": "A", "value": "1"}]}
    >>> strategic_merge(old, {"env": [{"name": "B", "value": "2"}]})["env"]
    [{'name': 'A', 'value': '1'}, {'name': 'B', 'value': '2'}]
"""

from __future__ import annotations

import copy
from typing import Any

from .store import ApiError

MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "ports": "containerPort",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "conditions": "type",
    "ownerReferences": "uid",
    "imagePullSecrets": "name",
}
SET_LISTS = frozenset({"finalizers"})

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, `null` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any, field: str = "") -> Any:
    """Kubernetes strategic merge for the keyed lists in `MERGE_KEYS`."""
    if isinstance(patch, list):
        if field in SET_LISTS and isinstance(target, list):
            return target + [item for item in patch if item not in target]
        key = MERGE_KEYS.get(field)
        if key and isinstance(target, list):
            return _merge_keyed_list(target, patch, key)
        return copy.deepcopy(patch)
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if name.startswith("$"):
            continue
        if value is None:
            result.pop(name, None)
        else:
            result[name] = strategic_merge(result.get(name), value, name)
    return result


def _merge_keyed_list(target: list[Any], patch: list[Any], key: str) -> list[Any]:
    result = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            result.append(copy.deepcopy(item))
            continue
        matches = [i for i, old in enumerate(result) if isinstance(old, dict)]
        index = next((i for i in matches if result[i].get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
        elif index is None:
            result.append(strategic_merge({}, item))
        else:
            result[index] = strategic_merge(result[index], item)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"invalid JSON pointer: {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    node = doc
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


def _json_patch_op(doc: Any, op: dict[str, Any]) -> Any:
    kind, parts = op.get("op"), _pointer(op.get("path", ""))
    if kind in ("move", "copy"):
        from_parts = _pointer(op["from"])
        source, last = _parent(doc, from_parts), from_parts[-1]
        value = copy.deepcopy(source[int(last)] if isinstance(source, list) else source[last])
        if kind == "move":
            doc = _json_patch_op(doc, {"op": "remove", "path": op["from"]})
        return _json_patch_op(doc, {"op": "add", "path": op["path"], "value": value})
    if not parts:
        if kind in ("add", "replace"):
            return copy.deepcopy(op["value"])
        raise ApiError(422, "Invalid", f"unsupported JSON patch operation on the root: {kind}")
    parent, last = _parent(doc, parts), parts[-1]
    if kind == "test":
        current = parent[int(last)] if isinstance(parent, list) else parent[last]
        if current != op.get("value"):
            raise ApiError(422, "Invalid", f"testing value {op['path']} failed")
    elif kind == "remove":
        del parent[int(last) if isinstance(parent, list) else last]
    elif kind == "add" and isinstance(parent, list):
        parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op["value"]))
    elif kind in ("add", "replace"):
        if kind == "replace" and isinstance(parent, dict) and last not in parent:
            raise ApiError(422, "Invalid", f"replace operation does not apply: {op['path']}")
        parent[int(last) if isinstance(parent, list) else last] = copy.deepcopy(op["value"])
    else:
        raise ApiError(422, "Invalid", f"Unexpected kind: {kind}")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 operations applied in order; a failing operation fails the whole patch."""
    if not isinstance(operations, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc = copy.deepcopy(target)
    try:
        for op in operations:
            doc = _json_patch_op(doc, op)
    except (KeyError, IndexError, ValueError, TypeError) as error:
        raise ApiError(422, "Invalid", f"the JSON patch could not be applied: {error}") from error
    return doc


def apply_patch(target: Any, patch: Any, content_type: str) -> Any:
    """Dispatch on the request's Content-Type (server-side apply is treated as a merge)."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == JSON_PATCH:
        return json_patch(target, patch)
    if kind == MERGE_PATCH:
        return merge_patch(target, patch)
    if kind in (STRATEGIC_PATCH, APPLY_PATCH):
        return strategic_merge(target, patch)
    raise ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}, {STRATEGIC_PATCH}",
    )
