"""Backends: where a step runs. See `base.Backend` for the protocol.

Example:
    >>> from k8s_ai_orchestrator.settings import ExecutorSettings
    >>> make_backend("local", ExecutorSettings.from_config({"local": {"cpus": 1}})).name
    'local'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..settings import ExecutorSettings
    from .base import Backend


def make_backend(name: str, settings: ExecutorSettings) -> Backend:
    """Build the backend called `name` from the executor's settings (imports it lazily)."""
    if name == "local":
        from .local import LocalBackend, LocalCapacity

        local = settings.local
        return LocalBackend(
            LocalCapacity.from_config(local),
            oversize=local.get("oversize", "run_alone"),
            log_dir=local.get("log_dir"),
            start_method=local.get("start_method", "spawn"),
        )
    if name == "kubernetes":
        from .kubernetes import backend_from_settings as kube_backend

        return kube_backend(settings)
    if name == "slurm":
        from .slurm import backend_from_settings as slurm_backend

        return slurm_backend(settings)
    raise ValueError(f"unknown backend {name!r}")
