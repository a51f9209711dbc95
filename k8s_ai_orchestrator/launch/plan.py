"""Where one step goes: its spec within the memory cap, its tenant, its backend. Pure.

Example:
    >>> from k8s_ai_orchestrator.spec import resolve_spec
    >>> settings = ExecutorSettings.from_config({"backend": "local"})
    >>> plan_step(settings, "tiles", resolve_spec({"size": "xs"})).backend
    'local'
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import TenantAccessError
from ..spec import ComputeSpec
from .settings import ExecutorSettings


@dataclass(frozen=True)
class PlannedStep:
    """Where one step goes, as resolved before its first launch."""

    key: str
    spec: ComputeSpec
    backend: str  # local | kubernetes | slurm
    tenant: str | None  # resolved tenant (kubernetes), else None


def plan_step(
    settings: ExecutorSettings, key: str, spec: ComputeSpec, run_tenant: str | None = None
) -> PlannedStep:
    """Resolve a step's tenant and backend; refuse what the settings never allow.

    The tenant is the step's own, else the run's (`run_tenant`, from the run's tags), else
    `default_tenant`.

    Raises:
        ConfigError: the step asks for more memory than `oom_escalation.max_memory`.
        TenantAccessError: the tenant is not in `allowed_tenants`.
    """
    settings.check_memory_cap(key, spec)
    tenant = spec.tenant or run_tenant or settings.default_tenant
    allowed = settings.allowed_tenants
    if tenant is not None and allowed is not None and tenant not in allowed:
        raise TenantAccessError(
            f"step '{key}' asks for tenant '{tenant}', which this run may not use; "
            f"allowed_tenants: {', '.join(allowed) or '(none)'}. Add it to allowed_tenants "
            "in the executor config or route the step to an allowed tenant"
        )
    return PlannedStep(key, spec, settings.backend_for(spec), tenant)
