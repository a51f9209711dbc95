"""Field validation a real API server does, with its exact messages (apimachinery's words).

Label and annotation keys and values, the annotations' total size, container and env var
names, resource quantities (malformed: 400 at decoding; negative, request over limit, a
fractional extended resource: 422) and ConfigMap/Secret keys. Each function returns causes
as (field, reason, message) for `resources.invalid`.

Example:
    >>> label_causes({"bad key!": "x"})[0][2][:35]
    'Invalid value: "bad key!": name par'
    >>> env_name_causes([{"name": "A=B"}], "spec.containers[0]")[0][0]
    'spec.containers[0].env[0].name'
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from kubernetes.utils import parse_quantity

from .store import ApiError, Obj

Cause = tuple[str, str, str]

_REGEX_HINT = "(e.g. {examples}, regex used for validation is '{regex}')"
_NAME_REGEX = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME = re.compile(f"^{_NAME_REGEX}$")
_NAME_HELP = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character "
    + _REGEX_HINT.format(examples="'MyName',  or 'my.name',  or '123-abc'", regex=_NAME_REGEX)
)
_VALUE_HELP = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character "
    + _REGEX_HINT.format(
        examples="'MyValue',  or 'my_value',  or '12345'", regex=f"({_NAME_REGEX})?"
    )
)
_SUBDOMAIN_REGEX = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_SUBDOMAIN = re.compile(f"^{_SUBDOMAIN_REGEX}$")
SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character "
    + _REGEX_HINT.format(examples="'example.com'", regex=_SUBDOMAIN_REGEX)
)
_DNS_LABEL_REGEX = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_LABEL = re.compile(f"^{_DNS_LABEL_REGEX}$")
DNS_LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character "
    + _REGEX_HINT.format(examples="'my-name',  or '123-abc'", regex=_DNS_LABEL_REGEX)
)
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
_CONFIG_KEY_HELP = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' "
    + _REGEX_HINT.format(
        examples="'key.name',  or 'KEY_NAME',  or 'key-name'", regex="[-._a-zA-Z0-9]+"
    )
)
_ENV_HELP = (
    "a valid environment variable name must consist only of printable ASCII characters other "
    "than '='"
)
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_QUANTITY_HELP = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
ANNOTATIONS_MAX_BYTES = 256 * 1024


def _invalid(field: str, value: str, message: str) -> Cause:
    return (field, "FieldValueInvalid", f'Invalid value: "{value}": {message}')


def _qualified_name_errors(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    errors = []
    if "/" in key and not prefix:
        errors.append("prefix part must be non-empty")
    elif prefix and (len(prefix) > 253 or not _SUBDOMAIN.match(prefix)):
        errors.append("prefix part " + SUBDOMAIN_HELP)
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 bytes")
    elif not _NAME.match(name):
        errors.append("name part " + _NAME_HELP)
    return errors


def label_causes(labels: Mapping[str, Any], field: str = "metadata.labels") -> list[Cause]:
    """Causes for label keys that are not qualified names and values that are not labels."""
    causes = []
    for key, value in labels.items():
        causes += [_invalid(field, key, error) for error in _qualified_name_errors(key)]
        text = str(value)
        if len(text) > 63:
            causes.append(_invalid(field, text, "must be no more than 63 bytes"))
        if text and not _NAME.match(text):
            causes.append(_invalid(field, text, _VALUE_HELP))
    return causes


def annotation_causes(annotations: Mapping[str, Any]) -> list[Cause]:
    """Causes for annotation keys that are not qualified names, and for oversized ones."""
    field = "metadata.annotations"
    causes = [
        _invalid(field, key, error) for key in annotations for error in _qualified_name_errors(key)
    ]
    size = sum(len(key) + len(str(value)) for key, value in annotations.items())
    if size > ANNOTATIONS_MAX_BYTES:
        message = f"Too long: may not be more than {ANNOTATIONS_MAX_BYTES} bytes"
        causes.append((field, "FieldValueTooLong", message))
    return causes


def metadata_causes(meta: Obj) -> list[Cause]:
    """Labels and annotations of an object's metadata."""
    return label_causes(meta.get("labels") or {}) + annotation_causes(meta.get("annotations") or {})


def env_name_causes(env: Iterable[Obj], where: str) -> list[Cause]:
    """Env var names: required, printable ASCII, no '=' (relaxed validation, Kubernetes 1.34+)."""
    causes = []
    for index, item in enumerate(env):
        field, name = f"{where}.env[{index}].name", str(item.get("name") or "")
        if not name:
            causes.append((field, "FieldValueRequired", "Required value"))
        elif any(not " " <= char <= "~" or char == "=" for char in name):
            causes.append(_invalid(field, name, _ENV_HELP))
    return causes


def container_name_causes(name: str, where: str) -> list[Cause]:
    """A container name must be a DNS label."""
    if not name or _DNS_LABEL.match(name) and len(name) <= 63:
        return []
    help_text = (
        DNS_LABEL_HELP if _DNS_LABEL.match(name) is None else "must be no more than 63 characters"
    )
    return [_invalid(f"{where}.name", name, help_text)]


def _amount(text: str) -> Decimal:
    return Decimal(parse_quantity(text))


def resource_causes(resources: Obj, where: str) -> list[Cause]:
    """Negative amounts, fractional extended resources, and requests above limits."""
    causes = []
    for section in ("limits", "requests"):
        for name, value in (resources.get(section) or {}).items():
            field = f"{where}.resources.{section}[{name}]"
            amount = _amount(str(value))
            if amount < 0:
                causes.append(_invalid(field, str(value), "must be greater than or equal to 0"))
            elif "/" in name and not name.startswith("kubernetes.io/") and amount % 1:
                causes.append(_invalid(field, str(value), "must be an integer"))
    limits = resources.get("limits") or {}
    for name, value in (resources.get("requests") or {}).items():
        if name in limits and _amount(str(value)) > _amount(str(limits[name])):
            message = f"must be less than or equal to {name} limit of {limits[name]}"
            causes.append(_invalid(f"{where}.resources.requests", str(value), message))
    return causes


def container_causes(container: Obj, where: str) -> list[Cause]:
    """What the API server checks in one container beyond its required fields."""
    return (
        container_name_causes(str(container.get("name") or ""), where)
        + env_name_causes(container.get("env") or [], where)
        + resource_causes(container.get("resources") or {}, where)
    )


def config_key_causes(obj: Obj) -> list[Cause]:
    """ConfigMap and Secret keys: `[-._a-zA-Z0-9]+`, at most 253 characters."""
    causes = []
    for section in ("data", "binaryData", "stringData"):
        for key in obj.get(section) or {}:
            if len(key) > 253 or not _CONFIG_KEY.match(key):
                causes.append(_invalid(f"{section}[{key}]", key, _CONFIG_KEY_HELP))
    return causes


def _quantities(obj: Obj) -> Iterable[str]:
    spec = obj.get("spec") or {}
    pod_spec = spec if "containers" in spec else (spec.get("template") or {}).get("spec") or {}
    for container in [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]:
        for section in ("limits", "requests"):
            yield from ((container.get("resources") or {}).get(section) or {}).values()
    yield from (spec.get("hard") or {}).values()
    for item in spec.get("limits") or []:
        for section in ("default", "defaultRequest", "max", "min"):
            yield from (item.get(section) or {}).values()


def check_decodable(kind: str, version: str, obj: Obj) -> None:
    """400 BadRequest, as the API server's decoder answers, for a malformed quantity."""
    for value in _quantities(obj):
        text = str(value)
        try:
            valid = bool(_QUANTITY.match(text)) and parse_quantity(text) is not None
        except ValueError:
            valid = False
        if not valid:
            raise ApiError(
                400,
                "BadRequest",
                f'{kind} in version "{version}" cannot be handled as a {kind}: {_QUANTITY_HELP}',
            )
