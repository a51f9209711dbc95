"""The Slurm backend: multi-node gang steps as sbatch jobs, over the CLI or slurmrestd.

Example:
    >>> from k8s_ai_orchestrator.backends.slurm import SlurmBackend, SlurmConfig
    >>> SlurmBackend(SlurmConfig(transport="cli", partition="gpu")).name
    'slurm'
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ...lazy import load_export

if TYPE_CHECKING:
    from .backend import SlurmBackend
    from .cli import CommandResult, Runner, subprocess_runner
    from .config import SlurmConfig, config_from_mapping
    from .script import BatchJob, batch_job, render_script
    from .states import JobInfo, to_step_status

# Each public name's module, imported the first time the name is asked for (PEP 562): a run
# worker that reads the executor config (`config.py`) loads no Slurm transport.
_HOMES = {
    "BatchJob": ".script",
    "CommandResult": ".cli",
    "JobInfo": ".states",
    "Runner": ".cli",
    "SlurmBackend": ".backend",
    "SlurmConfig": ".config",
    "batch_job": ".script",
    "config_from_mapping": ".config",
    "render_script": ".script",
    "subprocess_runner": ".cli",
    "to_step_status": ".states",
}


def __getattr__(name: str) -> Any:
    return load_export(sys.modules[__name__], _HOMES, name)


__all__ = [
    "BatchJob",
    "CommandResult",
    "JobInfo",
    "Runner",
    "SlurmBackend",
    "SlurmConfig",
    "batch_job",
    "config_from_mapping",
    "render_script",
    "subprocess_runner",
    "to_step_status",
]
