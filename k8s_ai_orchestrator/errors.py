"""One exception tree for the whole library.

Every message says what went wrong, where (step, tenant, job) and what to do next.
"""

from __future__ import annotations


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


class RunRefusedError(OrchestratorError):
    """Steps of a run can never run as configured; found at run start, before any submit.

    `problems` maps each refused step to what is wrong with it; the message names them all.
    """

    def __init__(self, message: str, problems: dict[str, tuple[str, ...]]) -> None:
        super().__init__(message)
        self.problems = problems
