"""The executor's configuration as plain frozen dataclasses (validated, no Dagster).

Example:
    >>> settings = ExecutorSettings.from_config({"backend": "local", "local": {"cpus": 2}})
    >>> settings.backend, settings.local["cpus"]
    ('local', 2)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..spec import (
    BACKENDS,
    ComputeSpec,
    SizeClass,
    parse_memory,
    parse_name,
    parse_size_table,
)
from .relaunch import OomEscalation, RelaunchPolicy

LOCAL_KEYS = {"cpus", "memory", "gpus", "oversize", "log_dir", "start_method"}


@dataclass(frozen=True)
class ExecutorSettings:
    """Resolved `ai_executor` config."""

    backend: str = "local"  # default backend for single-node steps
    size_classes: Mapping[str, SizeClass] = field(default_factory=dict)
    local: Mapping[str, Any] = field(default_factory=dict)  # LocalCapacity + oversize
    kubernetes: Mapping[str, Any] | None = None  # passed to the Kubernetes backend
    slurm: Mapping[str, Any] | None = None  # passed to the Slurm backend
    default_tenant: str | None = None
    allowed_tenants: tuple[str, ...] | None = None  # None: any tenant the config defines
    relaunch: RelaunchPolicy = RelaunchPolicy()
    grace_period_s: float = 30.0  # SIGTERM → SIGKILL, for the checkpoint save
    poll_interval_s: float = 0.1

    @classmethod
    def from_config(cls, raw: Mapping[str, Any]) -> ExecutorSettings:
        backend = raw.get("backend", "local")
        if backend not in BACKENDS:
            raise ConfigError(f"executor config: backend={backend!r}; use one of {BACKENDS}")
        local = dict(raw.get("local") or {})
        unknown = set(local) - LOCAL_KEYS
        if unknown:
            raise ConfigError(
                f"executor config: unknown local keys {sorted(unknown)}; allowed: "
                f"{sorted(LOCAL_KEYS)}"
            )
        for key in ("cpus", "memory"):
            if key in local and local[key] is not None and _is_zero(local[key]):
                raise ConfigError(
                    f"executor config: local.{key}={local[key]!r} leaves no capacity to run "
                    "steps; give a value above 0 or omit it to detect the machine's"
                )
        if local.get("start_method", "spawn") not in ("forkserver", "spawn"):
            raise ConfigError(
                f"executor config: local.start_method={local['start_method']!r}; use "
                "forkserver or spawn"
            )
        if local.get("oversize", "run_alone") not in ("run_alone", "fail"):
            raise ConfigError(
                f"executor config: local.oversize={local['oversize']!r}; use run_alone or fail"
            )
        try:
            table = parse_size_table(raw.get("size_classes"))
        except ValueError as exc:
            raise ConfigError(f"executor config: size_classes: {exc}") from None
        allowed = raw.get("allowed_tenants")
        default_tenant = raw.get("default_tenant")
        for name in [*(allowed or []), *([default_tenant] if default_tenant else [])]:
            _tenant_name(name)
        if allowed is not None and default_tenant and default_tenant not in allowed:
            raise ConfigError(
                f"executor config: default_tenant '{default_tenant}' is not in allowed_tenants "
                f"{list(allowed)}"
            )
        return cls(
            backend=backend,
            size_classes=table,
            local=local,
            kubernetes=raw.get("kubernetes"),
            slurm=raw.get("slurm"),
            default_tenant=default_tenant,
            allowed_tenants=tuple(allowed) if allowed is not None else None,
            relaunch=_relaunch_policy(raw),
            grace_period_s=float(raw.get("grace_period_s", 30.0)),
            poll_interval_s=float(raw.get("poll_interval_s", 0.1)),
        )

    def backend_for(self, spec: ComputeSpec) -> str:
        """Which backend a step goes to: its own choice, Slurm for gangs, else the default."""
        if spec.backend:
            return spec.backend
        if spec.is_gang and self.slurm is not None:
            return "slurm"
        return self.backend


def _is_zero(value: Any) -> bool:
    try:
        return float(str(value).rstrip("GgMmKkiI")) <= 0
    except ValueError:
        return False


def _tenant_name(name: Any) -> str:
    try:
        return parse_name(name, "tenant")
    except ValueError as exc:
        raise ConfigError(f"executor config: {exc}") from None


def _relaunch_policy(raw: Mapping[str, Any]) -> RelaunchPolicy:
    oom_raw = raw.get("oom_escalation") or {}
    factor = float(oom_raw.get("factor", 2.0))
    if factor <= 1:
        raise ConfigError(f"executor config: oom_escalation.factor={factor} must be > 1")
    max_attempts = int(oom_raw.get("max_attempts", 4))
    if max_attempts < 1:
        raise ConfigError(f"executor config: oom_escalation.max_attempts={max_attempts} < 1")
    try:
        max_memory = parse_memory(oom_raw.get("max_memory", "450Gi"), field="max_memory")
    except ValueError as exc:
        raise ConfigError(f"executor config: oom_escalation.{exc}") from None
    retries = int(raw.get("max_preemption_retries", 3))
    if retries < 0:
        raise ConfigError(f"executor config: max_preemption_retries={retries} must be >= 0")
    return RelaunchPolicy(OomEscalation(factor, max_memory, max_attempts), retries)
