"""One exception tree for the whole library.

Every message says what went wrong, where (step, tenant, job) and what to do next.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any


class OrchestratorError(Exception):
    """Base class of every error this library raises on purpose."""

    transient: bool = False


class ComputeSpecError(OrchestratorError, ValueError):
    """A compute spec (op tags or `compute(...)` arguments) is invalid.

    Example:
        >>> from k8s_ai_orchestrator import compute
        >>> compute(memory="512m")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ComputeSpecError: memory='512m' is not allowed: memory must be a number with a unit
        ...; "m" means milli (1/1000 byte); did you mean "512Mi"?
    """


class ConfigError(OrchestratorError, ValueError):
    """Executor or resource configuration is invalid."""


class SubmitError(OrchestratorError):
    """A step could not be submitted to its backend (pre-flight or API refusal)."""


class TenantAccessError(SubmitError):
    """A step tried to reach a tenant the run's configuration does not allow."""


class BackendError(OrchestratorError):
    """A backend call failed; `transient` says whether retrying may help."""

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class CheckpointError(OrchestratorError):
    """A checkpoint store cannot be used (bad root, unserializable state, ...)."""


class GangError(OrchestratorError):
    """A rank of a gang step failed or the gang could not start."""


class PipesProgramError(OrchestratorError):
    """A program launched through `AICompute.run` failed and will not be relaunched.

    The message names the step, where it ran, the reason (exit code, OOMKilled at every size
    tried, Pending past its timeout...) and the last lines of its log.
    """


class BudgetError(OrchestratorError):
    """A step, or the run, would cost more than the executor config's `budget` allows."""


class RunRefusedError(OrchestratorError):
    """Steps of a run can never run as configured; found at run start, before any submit.

    `problems` maps each refused step to what is wrong with it; the message names them all.
    """

    def __init__(self, message: str, problems: dict[str, tuple[str, ...]]) -> None:
        super().__init__(message)
        self.problems = problems


def check_keys(raw: Any, allowed: Iterable[str], where: str) -> None:
    """A `ConfigError` unless `raw` is a mapping whose keys are all in `allowed`; the message
    names the section, the unknown keys and the allowed ones.

    Example:
        >>> check_keys({"mode": "guard", "timeout": 5}, {"mode"}, "gang_admission")
        Traceback (most recent call last):
        ...
        k8s_ai_orchestrator.errors.ConfigError: gang_admission: unknown key(s) ['timeout']; \
allowed: mode
    """
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {type(raw).__name__}")
    allowed = set(allowed)
    unknown = set(raw) - allowed
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {sorted(unknown)}; allowed: {', '.join(sorted(allowed))}"
        )


def config_number(
    value: object,
    key: str,
    *,
    minimum: float = 0,
    above: bool = False,
    integer: bool = False,
) -> float:
    """`value` if it is a finite number ≥ `minimum` (> when `above`), else a `ConfigError`.

    The message names the key path, the value, what is allowed and the fix.

    Example:
        >>> config_number(2, "grace_period_s")
        2
        >>> config_number(-1, "kubernetes.api_retries", integer=True)
        Traceback (most recent call last):
        ...
        k8s_ai_orchestrator.errors.ConfigError: executor config: kubernetes.api_retries=-1 is \
not allowed: it must be a whole number >= 0; set it to 0 or more, or remove the key to use \
the default
    """
    kind = "whole number" if integer else "finite number"
    bound = f"{'>' if above else '>='} {minimum:g}"
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    valid = (
        is_number
        and math.isfinite(value)  # type: ignore[arg-type]
        and (value > minimum if above else value >= minimum)  # type: ignore[operator]
        and (not integer or float(value).is_integer())  # type: ignore[arg-type]
    )
    if not valid:
        fix = f"more than {minimum:g}" if above else f"{minimum:g} or more"
        shown = float(value) if is_number and not integer else value  # type: ignore[arg-type]
        raise ConfigError(
            f"executor config: {key}={shown!r} is not allowed: it must be a {kind} {bound}; "
            f"set it to {fix}, or remove the key to use the default"
        )
    return value  # type: ignore[return-value]
