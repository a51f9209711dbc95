"""Run heavy AI pipeline steps from Dagster: right-sized, checkpointed, explained.

Example:
    >>> from dagster import asset
    >>> from k8s_ai_orchestrator import compute
    >>> @asset(op_tags=compute("xs"))
    ... def tiles(): ...
"""

from .errors import ComputeSpecError, OrchestratorError
from .tags import compute

__all__ = ["ComputeSpecError", "OrchestratorError", "compute"]
