"""The API server's naming rules, checked before a Job is built so a bad name is no 422 later.

Each rule answers `problem(value)`: None for a valid value, else what is allowed, worded for an
error message. The rules are the ones `k8s.io/apimachinery/pkg/util/validation` applies.

Example:
    >>> DNS_LABEL.problem("team-a") is None
    True
    >>> DNS_LABEL.problem("Team_A")  # doctest: +ELLIPSIS
    "a DNS-1123 label: at most 63 lowercase letters, digits and '-', ..."
    >>> label_key_problem("k8s-ai/run-id") is None
    True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

IMAGE_PULL_POLICIES = ("Always", "IfNotPresent", "Never")

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"


@dataclass(frozen=True)
class NameRule:
    """One naming rule: a pattern, a length limit and how to say what it allows."""

    pattern: str  # full-match regular expression
    max_length: int
    allowed: str  # what is allowed, for error messages

    def problem(self, value: object) -> str | None:
        """None if `value` follows the rule, else what the rule allows."""
        text = value if isinstance(value, str) else ""
        if len(text) <= self.max_length and re.fullmatch(self.pattern, text):
            return None
        return self.allowed


DNS_LABEL = NameRule(
    _LABEL,
    63,
    "a DNS-1123 label: at most 63 lowercase letters, digits and '-', starting and ending with "
    "a letter or digit",
)
DNS_SUBDOMAIN = NameRule(
    rf"{_LABEL}(\.{_LABEL})*",
    253,
    "a DNS-1123 subdomain: at most 253 lowercase letters, digits, '-' and '.', starting and "
    "ending with a letter or digit",
)
LABEL_VALUE = NameRule(
    rf"({_QUALIFIED})?",
    63,
    "a label value: empty, or at most 63 letters, digits, '-', '_' and '.', starting and ending "
    "with a letter or digit",
)
ENV_VAR_NAME = NameRule(
    r"[-._a-zA-Z][-._a-zA-Z0-9]*",
    1 << 16,
    "an environment variable name: letters, digits, '-', '_' and '.', not starting with a digit",
)
_QUALIFIED_NAME = NameRule(_QUALIFIED, 63, "")


def label_key_problem(key: object) -> str | None:
    """None if `key` is a valid label (or annotation) key: `[prefix/]name`."""
    allowed = (
        "a label key: an optional DNS-1123 subdomain prefix and '/', then a name of at most 63 "
        "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"
    )
    text = key if isinstance(key, str) else ""
    prefix, _, name = text.rpartition("/")
    if "/" in text and DNS_SUBDOMAIN.problem(prefix) is not None:
        return allowed
    return allowed if _QUALIFIED_NAME.problem(name) is not None else None


def image_pull_policy_problem(policy: object) -> str | None:
    """None for Always, IfNotPresent or Never (case matters to the API server)."""
    if policy in IMAGE_PULL_POLICIES:
        return None
    return "one of " + ", ".join(IMAGE_PULL_POLICIES) + " (case matters)"
