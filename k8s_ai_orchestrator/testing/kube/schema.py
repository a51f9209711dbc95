"""Field-level checks against the official client's models (kubernetes.client.models).

The client's `openapi_types`/`attribute_map` are the published schema; walking a JSON object
against them finds fields the real API server would reject under `fieldValidation=Strict`
and fields a strict client would refuse to deserialize.

Example:
    >>> unknown_fields({"spec": {"containers": [], "foo": 1}}, "V1Pod")
    ['spec.foo']
"""

from __future__ import annotations

from typing import Any

import kubernetes.client.models as models

_PRIMITIVES = frozenset({"str", "int", "float", "bool", "object", "datetime", "date"})


def unknown_fields(data: Any, type_name: str, path: str = "", prune: bool = False) -> list[str]:
    """Dotted paths of the fields in `data` that `type_name` does not declare.

    With `prune`, those fields are also removed from `data` (fieldValidation Ignore/Warn).
    """
    if type_name in _PRIMITIVES or data is None:
        return []
    if type_name.startswith("list["):
        inner = type_name[5:-1]
        if not isinstance(data, list):
            return []
        found: list[str] = []
        for index, item in enumerate(data):
            found += unknown_fields(item, inner, f"{path}[{index}]", prune)
        return found
    if type_name.startswith("dict("):
        inner = type_name[5:-1].split(", ", 1)[1]
        if not isinstance(data, dict):
            return []
        found = []
        for key, item in data.items():
            found += unknown_fields(item, inner, f"{path}.{key}" if path else key, prune)
        return found
    model = getattr(models, type_name, None)
    if model is None or not isinstance(data, dict):
        return []
    by_json_key = {json_key: attr for attr, json_key in model.attribute_map.items()}
    found = []
    for key, value in list(data.items()):
        field_path = f"{path}.{key}" if path else key
        attr = by_json_key.get(key)
        if attr is None:
            found.append(field_path)
            if prune:
                del data[key]
        else:
            found += unknown_fields(value, model.openapi_types[attr], field_path, prune)
    return found
