"""The Slurm backend: multi-node gang steps as sbatch jobs, over the CLI or slurmrestd.

Example:
    >>> from k8s_ai_orchestrator.backends.slurm import SlurmBackend, SlurmConfig
    >>> SlurmBackend(SlurmConfig(transport="cli", partition="gpu")).name
    'slurm'
"""

from __future__ import annotations

from .backend import SlurmBackend
from .cli import CommandResult, Runner, subprocess_runner
from .config import SlurmConfig, config_from_mapping
from .script import BatchJob, batch_job, render_script
from .states import JobInfo, to_step_status

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
