"""The Slurm backend: multi-node gang steps as sbatch jobs, over the CLI or slurmrestd.

Example:
    >>> from k8s_ai_orchestrator.backends.slurm import SlurmBackend, SlurmConfig
    >>> SlurmBackend(SlurmConfig(transport="cli", partition="gpu")).name
    'slurm'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .backend import SlurmBackend
from .cli import CommandResult, Runner, subprocess_runner
from .config import SlurmConfig, config_from_mapping
from .script import JOB_DIR_ENV, BatchJob, batch_job, render_script
from .states import JobInfo, to_step_status

if TYPE_CHECKING:
    from ...settings import ExecutorSettings


def backend_from_settings(settings: ExecutorSettings) -> SlurmBackend:
    """The backend for the executor's `slurm:` config (an empty mapping gives the defaults)."""
    return SlurmBackend(config_from_mapping(settings.slurm))


__all__ = [
    "JOB_DIR_ENV",
    "BatchJob",
    "CommandResult",
    "JobInfo",
    "Runner",
    "SlurmBackend",
    "SlurmConfig",
    "backend_from_settings",
    "batch_job",
    "config_from_mapping",
    "render_script",
    "subprocess_runner",
    "to_step_status",
]
