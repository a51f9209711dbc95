"""The executor's configuration as plain frozen dataclasses (validated, no Dagster).

Example:
    >>> settings = ExecutorSettings.from_config({"backend": "local", "local": {"cpus": 2}})
    >>> settings.backend, settings.local["cpus"]
    ('local', 2)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..backends.slurm.config import config_from_mapping
from ..errors import ConfigError, config_number
from ..memorygrowth import MemoryGrowth
from ..spec import (
    BACKENDS,
    ComputeSpec,
    SizeClass,
    format_memory,
    parse_memory,
    parse_name,
    parse_size_table,
)
from .autosize import AutoSizing
from .budget import Budget
from .cost import Prices
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
    idle_poll_interval_s: float = 1.0  # the pass interval backs off to this while idle
    max_concurrent: int | None = None  # steps in flight at once; None = unlimited
    gang_backend: str | None = None  # multi-node steps: slurm | kubernetes | local; None = auto
    growth: MemoryGrowth | None = None  # grow memory in place (oom_escalation.grow_at)
    auto_sizing: AutoSizing = AutoSizing()  # how compute(memory="auto") is sized
    prices: Prices | None = None  # what reserved resources cost; None: resource-hours only
    budget: Budget | None = None  # caps checked before anything is submitted

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
        if local.get("cpus") is not None:
            config_number(local["cpus"], "local.cpus", above=True)
        if local.get("gpus") is not None:
            config_number(local["gpus"], "local.gpus", integer=True)
        if local.get("log_dir") is not None:
            local["log_dir"] = _log_dir(local["log_dir"])
        if local.get("start_method", "spawn") not in ("forkserver", "spawn"):
            raise ConfigError(
                f"executor config: local.start_method={local['start_method']!r}; use "
                "forkserver or spawn"
            )
        if local.get("oversize", "run_alone") not in ("run_alone", "fail"):
            raise ConfigError(
                f"executor config: local.oversize={local['oversize']!r}; use run_alone or fail"
            )
        gang_backend = raw.get("gang_backend")
        if gang_backend is not None and gang_backend not in BACKENDS:
            raise ConfigError(
                f"executor config: gang_backend={gang_backend!r}; use one of {BACKENDS} (where "
                "multi-node steps run), or remove it: then they go to Slurm when a slurm section "
                "is given, else to the default backend"
            )
        if gang_backend in ("slurm", "kubernetes") and raw.get(gang_backend) is None:
            raise ConfigError(
                f"executor config: gang_backend={gang_backend!r} but there is no {gang_backend} "
                f"section: add executor config {gang_backend}: {{...}} "
                "(see docs/slurm-and-gangs.md)"
            )
        if raw.get("slurm") is not None:  # whatever the steps: a bad value never waits for a gang
            config_from_mapping(raw["slurm"])
        table = _size_table(raw.get("size_classes"))
        allowed = raw.get("allowed_tenants")
        default_tenant = raw.get("default_tenant")
        for name in [*(allowed or []), *([default_tenant] if default_tenant else [])]:
            _tenant_name(name)
        if allowed is not None and default_tenant and default_tenant not in allowed:
            raise ConfigError(
                f"executor config: default_tenant '{default_tenant}' is not in allowed_tenants "
                f"{list(allowed)}: add it to allowed_tenants or choose a default_tenant from them"
            )
        poll = float(config_number(raw.get("poll_interval_s", 0.1), "poll_interval_s", above=True))
        prices = Prices.from_config(raw.get("prices"), "executor config: prices")
        return cls(
            backend=backend,
            size_classes=table,
            local=local,
            kubernetes=raw.get("kubernetes"),
            slurm=raw.get("slurm"),
            default_tenant=default_tenant,
            allowed_tenants=tuple(allowed) if allowed is not None else None,
            relaunch=_relaunch_policy(raw),
            growth=_growth(raw),
            auto_sizing=_auto_sizing(raw.get("auto_sizing")),
            max_concurrent=_max_concurrent(raw.get("max_concurrent")),
            gang_backend=gang_backend,
            grace_period_s=float(config_number(raw.get("grace_period_s", 30.0), "grace_period_s")),
            poll_interval_s=poll,
            idle_poll_interval_s=_idle_poll(raw, poll),
            prices=prices,
            budget=Budget.from_config(raw.get("budget"), prices, "executor config: budget"),
        )

    def check_memory_cap(self, step_key: str, spec: ComputeSpec) -> None:
        """Refuse a step whose first launch would ask for more than `oom_escalation.max_memory`.

        Example:
            >>> from k8s_ai_orchestrator.spec import resolve_spec
            >>> settings = ExecutorSettings.from_config({"oom_escalation": {"max_memory": "4Gi"}})
            >>> settings.check_memory_cap("tiles", resolve_spec({"memory": "8Gi"}))
            Traceback (most recent call last):
            ...
            k8s_ai_orchestrator.errors.ConfigError: step 'tiles' declares 8Gi of memory, more \
than oom_escalation.max_memory=4Gi, the most this executor may ask for: raise \
oom_escalation.max_memory to at least 8Gi or give the step less with compute(memory=...)
        """
        cap = self.relaunch.oom.max_memory_bytes
        if spec.memory_bytes > cap:
            raise ConfigError(
                f"step '{step_key}' declares {format_memory(spec.memory_bytes)} of memory, more "
                f"than oom_escalation.max_memory={format_memory(cap)}, the most this executor "
                f"may ask for: raise oom_escalation.max_memory to at least "
                f"{format_memory(spec.memory_bytes)} or give the step less with "
                "compute(memory=...)"
            )

    def backend_for(self, spec: ComputeSpec) -> str:
        """Which backend a step goes to: its own choice; for a gang `gang_backend`, else Slurm
        when configured; else the default.

        Example:
            >>> from k8s_ai_orchestrator.spec import resolve_spec
            >>> settings = ExecutorSettings.from_config(
            ...     {"slurm": {}, "kubernetes": {}, "gang_backend": "kubernetes"})
            >>> settings.backend_for(resolve_spec({"nodes": 2}))
            'kubernetes'
        """
        if spec.backend:
            return spec.backend
        if spec.is_gang and self.gang_backend is not None:
            return self.gang_backend
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
        raise ConfigError(f"executor config: {exc}; use the tenant's name, e.g. team-a") from None


def _relaunch_policy(raw: Mapping[str, Any]) -> RelaunchPolicy:
    oom_raw = raw.get("oom_escalation") or {}
    factor = config_number(
        oom_raw.get("factor", 2.0), "oom_escalation.factor", minimum=1, above=True
    )
    max_attempts = config_number(
        oom_raw.get("max_attempts", 4), "oom_escalation.max_attempts", minimum=1, integer=True
    )
    try:
        max_memory = parse_memory(oom_raw.get("max_memory", "450Gi"), field="max_memory")
    except ValueError as exc:
        raise ConfigError(
            f"executor config: oom_escalation.{exc}; set oom_escalation.max_memory to the "
            "largest memory a step may be given"
        ) from None
    retries = config_number(
        raw.get("max_preemption_retries", 3), "max_preemption_retries", integer=True
    )
    return RelaunchPolicy(OomEscalation(float(factor), max_memory, int(max_attempts)), int(retries))


def _growth(raw: Mapping[str, Any]) -> MemoryGrowth | None:
    """`oom_escalation.grow_at` as a policy (None: a step at its limit is OOMKilled)."""
    oom = _relaunch_policy(raw).oom
    grow_at = (raw.get("oom_escalation") or {}).get("grow_at")
    if grow_at is None:
        return None
    config_number(grow_at, "oom_escalation.grow_at", above=True)
    if grow_at >= 1:
        raise ConfigError(
            f"executor config: oom_escalation.grow_at={grow_at!r} is not allowed: it is the "
            "fraction of a step's memory limit in use at which the limit is raised in place, "
            "above 0 and below 1; write e.g. 0.85, or remove it to relaunch only after an OOM "
            "kill"
        )
    return MemoryGrowth(float(grow_at), oom.factor, oom.max_memory_bytes)


def _auto_sizing(raw: Any) -> AutoSizing:
    if raw is None:
        return AutoSizing()
    headroom = config_number(raw.get("headroom", 1.2), "auto_sizing.headroom", minimum=1)
    runs = config_number(raw.get("runs", 5), "auto_sizing.runs", minimum=1, integer=True)
    trend = raw.get("trend", True)
    if not isinstance(trend, bool):
        raise ConfigError(
            f"executor config: auto_sizing.trend={trend!r} is not allowed: it must be true or "
            "false; set it to false to size memory by the highest recorded peak, or remove "
            "the key to follow the peaks' trend"
        )
    return AutoSizing(float(headroom), int(runs), trend)


def _idle_poll(raw: Mapping[str, Any], poll: float) -> float:
    """`idle_poll_interval_s`: at least `poll_interval_s`, so the pass interval only grows."""
    return float(
        config_number(
            raw.get("idle_poll_interval_s", max(1.0, poll)), "idle_poll_interval_s", minimum=poll
        )
    )


def _max_concurrent(value: Any) -> int | None:
    if value is None:
        return None
    return int(config_number(value, "max_concurrent", minimum=1, integer=True))


def _size_table(raw: Any) -> Mapping[str, SizeClass]:
    """The size table with the config's overrides; each override must be a mapping."""
    if raw is not None and not isinstance(raw, Mapping):
        raise ConfigError(
            f"executor config: size_classes={raw!r} is not allowed: give a mapping "
            "{name: {cpu, memory, gpu}}, e.g. {xl: {cpu: 64, memory: 400Gi}}"
        )
    for name, value in (raw or {}).items():
        if not isinstance(value, Mapping):
            raise ConfigError(
                f"executor config: size_classes.{name}={value!r} is not allowed: give "
                f"{{cpu, memory, gpu}}, e.g. {{{name}: {{cpu: 4, memory: 16Gi}}}}, or remove "
                f"the entry to keep the built-in '{name}'"
            )
    try:
        return parse_size_table(raw)
    except (ValueError, TypeError) as exc:
        raise ConfigError(
            f"executor config: size_classes: {exc}; fix that entry of size_classes or remove it"
        ) from None


def _log_dir(path: Any) -> str:
    """`local.log_dir`, created if missing; a path that is not a directory is refused."""
    if not isinstance(path, str) or not path:
        raise ConfigError(
            f"executor config: local.log_dir={path!r} is not allowed: give a directory path"
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(
            f"executor config: local.log_dir={path!r} exists and is not a directory: point "
            "it at a directory (it is created if missing) or remove the file"
        )
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"executor config: local.log_dir={path!r} cannot be created ({exc.strerror}): "
            "choose a directory this process may write, or omit it to use a temp dir"
        ) from None
    return path
