"""Build a backend from the executor's settings: the one place that maps config to backends.

Example:
    >>> from k8s_ai_orchestrator.launch.settings import ExecutorSettings
    >>> make_backend("local", ExecutorSettings.from_config({"local": {"cpus": 1}})).name
    'local'
"""

from __future__ import annotations

from ..backends.base import Backend
from .settings import ExecutorSettings


def make_backend(name: str, settings: ExecutorSettings) -> Backend:
    """Build the backend called `name` from the executor's settings (imports it lazily)."""
    if name == "local":
        from ..backends.local import LocalBackend, LocalCapacity

        local = settings.local
        return LocalBackend(
            LocalCapacity.from_config(local),
            oversize=local.get("oversize", "run_alone"),
            log_dir=local.get("log_dir"),
            start_method=local.get("start_method", "spawn"),
            growth=settings.growth,
        )
    if name == "kubernetes":
        from ..backends.kubernetes import KubernetesBackend, KubernetesConfig

        return KubernetesBackend(
            KubernetesConfig.from_dict(settings.kubernetes),
            allowed_tenants=settings.allowed_tenants,
            default_tenant=settings.default_tenant,
            growth=settings.growth,
        )
    if name == "slurm":
        from ..backends.slurm import SlurmBackend, config_from_mapping

        return SlurmBackend(config_from_mapping(settings.slurm))
    raise ValueError(f"unknown backend {name!r}")
