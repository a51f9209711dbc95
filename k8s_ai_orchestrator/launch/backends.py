"""Build a backend from the executor's settings: the one place that maps config to backends.

Example:
    >>> from k8s_ai_orchestrator.launch.settings import ExecutorSettings
    >>> backend = make_backend("local", ExecutorSettings.from_config({"local": {"cpus": 1}}))
    >>> backend.name
    'local'
    >>> backend.close()  # its thread stopped, its temp folder removed
"""

from __future__ import annotations

from ..backends.base import Backend, CancelsRuns
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


def configured_backends(settings: ExecutorSettings) -> list[str]:
    """The backends a run with these settings may use: local, and each one configured."""
    names = ["local"]
    names += ["kubernetes"] if settings.kubernetes is not None else []
    names += ["slurm"] if settings.slurm is not None else []
    return names


def cancel_run(settings: ExecutorSettings, run_id: str) -> dict[str, list[str]]:
    """Cancel every attempt of `run_id` on every backend its settings configure that can find
    them by the run alone (`CancelsRuns`); the job ids cancelled, by backend."""
    cancelled: dict[str, list[str]] = {}
    for name in configured_backends(settings):
        backend = make_backend(name, settings)
        try:
            if isinstance(backend, CancelsRuns):
                cancelled[name] = backend.cancel_run(run_id)
        finally:
            backend.close()
    return cancelled
