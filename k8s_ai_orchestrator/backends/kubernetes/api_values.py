"""Config values written into a Job as Kubernetes API objects, checked against the client's models.

The kubernetes client's models refuse a bad value with a bare `ValueError` or `Exception`, or
quietly change it (`drop: ALL` becomes `['A', 'L', 'L']`, `privileged: "yes"` becomes
`true`). Each value is therefore built into its model and serialized back: anything that does
not come back as it was written is a `ConfigError` naming the field, the value and its type.

Example:
    >>> security_context({"runAsUser": 1000, "runAsNonRoot": True})
    {'runAsUser': 1000, 'runAsNonRoot': True}
    >>> security_context({"runAsUser": "root"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    k8s_ai_orchestrator.errors.ConfigError: kubernetes.security_context.runAsUser='root' is \
not allowed: the Kubernetes API takes a whole number there ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict
from kubernetes.client import ApiClient, Configuration, V1SecurityContext

from ...errors import ConfigError

_SERIALIZER = ApiClient(Configuration())
_FIELD = "kubernetes.security_context"
_EXPLAIN = "kubectl explain pod.spec.containers.securityContext"
_TYPE_WORDS = {"int": "a whole number", "bool": "true or false", "str": "a string"}


def security_context(value: Any) -> dict[str, Any]:
    """`value` as a container securityContext, or a `ConfigError` naming the bad field."""
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"{_FIELD}={value!r} is not allowed: give a mapping of SecurityContext fields "
            "(camelCase, as in the Kubernetes API), e.g. {runAsUser: 1000, runAsNonRoot: true}, "
            "or remove it to use the hardened default"
        )
    names = V1SecurityContext.attribute_map  # snake_case → camelCase
    unknown = sorted(str(key) for key in value if key not in names.values())
    if unknown:
        raise ConfigError(
            f"{_FIELD}: unknown field(s) {unknown}; allowed (camelCase, as in the Kubernetes "
            f"API): {', '.join(sorted(names.values()))}; fix the name or remove it"
        )
    types = {
        camel: _type_words(V1SecurityContext.openapi_types[snake]) for snake, camel in names.items()
    }
    for key, item in value.items():
        if _as_sent(key, item) != item:
            raise ConfigError(
                f"{_FIELD}.{key}={item!r} is not allowed: the Kubernetes API takes {types[key]} "
                f"there (see `{_EXPLAIN}.{key}`); fix the value or remove the field"
            )
    return dict(value)


def _type_words(openapi_type: str) -> str:
    """'int' → 'a whole number', 'V1Capabilities' → 'a Capabilities object'."""
    return _TYPE_WORDS.get(openapi_type, f"a {openapi_type.removeprefix('V1')} object")


def _as_sent(key: str, item: Any) -> Any:
    """What the Job would carry for `{key: item}`, or a value unlike any item if the model
    refuses it."""
    try:
        model = k8s_model_from_dict(
            V1SecurityContext, k8s_snake_case_dict(V1SecurityContext, {key: item})
        )
    except Exception:  # the client's models raise ValueError, TypeError or a bare Exception
        return _REFUSED
    return _SERIALIZER.sanitize_for_serialization(model).get(key)


_REFUSED = object()
