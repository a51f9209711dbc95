"""Label selectors (=, ==, !=, in, notin, exists, !exists) and field selectors.

Example:
    >>> match = parse_label_selector("app=web,tier in (a, b),!legacy")
    >>> match({"app": "web", "tier": "a"}), match({"app": "web", "tier": "c"})
    (True, False)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from .store import ApiError

LabelMatcher = Callable[[Mapping[str, str]], bool]

_SET_RE = re.compile(r"^\s*([^\s!=]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([^\s!=()]+)\s*$")


def _split_requirements(selector: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts, depth, current = [], 0, ""
    for char in selector:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part for part in parts if part.strip()]


def _requirement(text: str) -> LabelMatcher:
    if found := _SET_RE.match(text):
        key, op, raw = found.groups()
        values = {value.strip() for value in raw.split(",") if value.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if found := _EQ_RE.match(text):
        key, op, value = found.groups()
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if found := _EXISTS_RE.match(text):
        negate, key = found.groups()
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise ApiError(400, "BadRequest", f"unable to parse requirement: {text.strip()!r}")


def parse_label_selector(selector: str | None) -> LabelMatcher:
    """A predicate over a label mapping; an empty selector matches everything."""
    requirements = [_requirement(part) for part in _split_requirements(selector or "")]
    return lambda labels: all(requirement(labels) for requirement in requirements)


FieldGetter = Callable[[dict], str]
FieldMatcher = Callable[[dict], bool]


def parse_field_selector(selector: str | None, getters: Mapping[str, FieldGetter]) -> FieldMatcher:
    """A predicate over an object; unsupported field labels answer 400 as the real server."""
    checks: list[tuple[FieldGetter, str, bool]] = []
    for part in _split_requirements(selector or ""):
        found = re.match(r"^\s*([^!=\s]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not found:
            raise ApiError(400, "BadRequest", f"invalid selector: '{selector}'")
        field, op, value = found.groups()
        getter = getters.get(field)
        if getter is None:
            raise ApiError(
                400,
                "BadRequest",
                f'Unable to find "{field}" field label: field label not supported: {field}',
            )
        checks.append((getter, value, op == "!="))
    return lambda obj: all((getter(obj) == value) != neg for getter, value, neg in checks)
