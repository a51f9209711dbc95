"""Where one step goes: its spec within the memory cap, its tenant, its backend. Pure.

Example:
    >>> from k8s_ai_orchestrator.spec import resolve_spec
    >>> settings = ExecutorSettings.from_config({"backend": "local"})
    >>> plan_step(settings, "tiles", resolve_spec({"size": "xs"})).backend
    'local'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .. import stepenv
from ..backends.base import LaunchRequest
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

    @property
    def where(self) -> str:
        """Where it runs, for messages: "local", "kubernetes tenant 'team-a'"."""
        return self.backend + (f" tenant '{self.tenant}'" if self.tenant else "")


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


def launch_request(
    settings: ExecutorSettings,
    step: PlannedStep,
    spec: ComputeSpec,
    *,
    run_id: str,
    attempt: int,
    command: Sequence[str],
    preemptions: int = 0,
    labels: Mapping[str, str] | None = None,
    env: Mapping[str, str] | None = None,
    raw_command: bool = False,
    parent_step_key: str = "",
) -> LaunchRequest:
    """The request of one attempt of `step` at `spec`: its command, the step environment
    (run, step, attempt, size, grace period, preemption relaunches left) over `env`.

    Example:
        >>> from k8s_ai_orchestrator.spec import resolve_spec
        >>> settings = ExecutorSettings.from_config({"backend": "local"})
        >>> step = plan_step(settings, "tiles", resolve_spec({"size": "xs"}))
        >>> request = launch_request(settings, step, step.spec, run_id="r1", attempt=0,
        ...                          command=["python", "-c", "pass"])
        >>> request.env["K8S_AI_STEP_KEY"], request.attempt, request.measure_usage
        ('tiles', 0, False)
        >>> priced = ExecutorSettings.from_config({"backend": "local", "prices": {"cpu_hour": 1}})
        >>> launch_request(priced, step, step.spec, run_id="r1", attempt=0,
        ...                command=["python"]).measure_usage  # its used figures are wanted
        True
    """
    left = settings.relaunch.max_preemption_retries - preemptions
    step_env = stepenv.step_env(
        backend=step.backend,
        run_id=run_id,
        step_key=step.key,
        attempt=attempt,
        spec=spec,
        grace_s=settings.grace_period_s,
        preemption_relaunches_left=left,
    )
    return LaunchRequest(
        run_id=run_id,
        step_key=step.key,
        attempt=attempt,
        command=list(command),
        env={**step_env, **(env or {})},
        spec=spec,
        tenant=step.tenant,
        grace_period_s=settings.grace_period_s,
        labels=dict(labels or {}),
        raw_command=raw_command,
        parent_step_key=parent_step_key,
        measure_usage=settings.prices is not None,
    )
