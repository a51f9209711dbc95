"""Run heavy AI pipeline steps from Dagster: right-sized, checkpointed, explained.

Example:
    >>> from dagster import Definitions, asset
    >>> from k8s_ai_orchestrator import ai_executor, compute
    >>> @asset(op_tags=compute("xs"))
    ... def tiles(): ...
    >>> defs = Definitions(assets=[tiles], executor=ai_executor)
"""

from .checkpoint import CheckpointStore
from .errors import ComputeSpecError, OrchestratorError
from .executor.definition import ai_executor
from .gang import Gang
from .pipes import AICompute
from .tags import compute

__all__ = [
    "AICompute",
    "CheckpointStore",
    "ComputeSpecError",
    "Gang",
    "OrchestratorError",
    "ai_executor",
    "compute",
]
