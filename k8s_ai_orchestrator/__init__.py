"""Run heavy AI pipeline steps from Dagster: right-sized, checkpointed, explained.

The public names load on first use, so a process that needs only a small part of the package
(the step pod's memory reporter, `steppod`) does not import Dagster.

Example:
    >>> from dagster import Definitions, asset
    >>> from k8s_ai_orchestrator import ai_executor, compute
    >>> @asset(op_tags=compute("xs"))
    ... def tiles(): ...
    >>> defs = Definitions(assets=[tiles], executor=ai_executor)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .checkpoint import CheckpointStore
    from .errors import ComputeSpecError, OrchestratorError
    from .executor.definition import ai_executor
    from .executor.k8s_run_launcher import AIK8sRunLauncher
    from .executor.run_launcher import ProcessRunLauncher
    from .gang import Gang
    from .pipes import AICompute
    from .tags import compute

__all__ = [
    "AICompute",
    "AIK8sRunLauncher",
    "CheckpointStore",
    "ComputeSpecError",
    "Gang",
    "OrchestratorError",
    "ProcessRunLauncher",
    "ai_executor",
    "compute",
]


def __getattr__(name: str) -> Any:
    """Load a public name the first time it is asked for (PEP 562)."""
    value = _load(name)
    globals()[name] = value
    return value


def _load(name: str) -> Any:
    if name == "AICompute":
        from .pipes import AICompute

        return AICompute
    if name == "AIK8sRunLauncher":
        from .executor.k8s_run_launcher import AIK8sRunLauncher

        return AIK8sRunLauncher
    if name == "CheckpointStore":
        from .checkpoint import CheckpointStore

        return CheckpointStore
    if name in ("ComputeSpecError", "OrchestratorError"):
        from . import errors

        return getattr(errors, name)
    if name == "Gang":
        from .gang import Gang

        return Gang
    if name == "ProcessRunLauncher":
        from .executor.run_launcher import ProcessRunLauncher

        return ProcessRunLauncher
    if name == "ai_executor":
        from .executor.definition import ai_executor

        return ai_executor
    if name == "compute":
        from .tags import compute

        return compute
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
