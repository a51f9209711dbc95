"""What a step's attempts cost and what of it was wasted: pure, from what each attempt reserved.

An attempt reserves its size for its wall time (`ResourceUsage`: CPU-, GiB- and GPU-seconds).
With `prices` in the executor config, that is money too; without, it stays CPU-, GiB- and
GPU-seconds, never a made-up price. Waste is split by cause:

- `oom_killed`: attempts killed for memory; the next attempt redoes all their work;
- `interrupted`: attempts preempted, evicted or lost: the share of each that its relaunch
  redoes. A step that stopped through its checkpoint handle says how long ago its last save
  was (`ResourceUsage.lost_seconds`; 0 when it saved as it stopped): that share of its wall
  time. Otherwise (no checkpoint, killed before it said) the whole attempt;
- `gang_waiting`: a Kubernetes gang's ranks that ran while the others were not running yet
  (all a gang that never ran whole reserved): held, no work done
  (`ResourceUsage.waiting_node_seconds`);
- `quota_idle`: a Kubernetes attempt's quota held before it ran: Kueue admitted its Job, its
  pods waited (`ResourceUsage.quota_idle_seconds`): held, no work done. The wait before
  admission holds nothing and is no waste (`queued_seconds`);
- `unused_memory`: memory reserved above the measured peak, for the wall time of the attempts
  whose peak the backend measured (none on Kubernetes without in-place growth).

An attempt's waiting parts are never also counted under how it ended: an OOM-killed gang's
ranks' waiting is `gang_waiting`, what it ran `oom_killed`.

Example:
    >>> prices = Prices.from_config({"cpu_hour": 0.04, "memory_gib_hour": 0.005,
    ...     "gpu_hour": 2.0, "gpu_hour_by_type": {"h100": 4.0}, "preemptible_factor": 0.5})
    >>> spec = ComputeSpec(cpu=8, memory_bytes=64 * 2**30, gpu=1, gpu_type="h100")
    >>> from dataclasses import replace
    >>> done = ResourceUsage(cpu_seconds=28800, memory_gib_seconds=230400, gpu_seconds=3600,
    ...     wall_seconds=3600, max_rss_bytes=32 * 2**30)
    >>> oom = replace(done, max_rss_bytes=None, ended="OOMKilled")
    >>> figures = step_costs([oom, done], spec, prices)
    >>> figures["cost"], figures["waste_oom_killed_cost"], figures["waste_unused_memory_cost"]
    (9.28, 4.64, 0.16)
    >>> step_costs([done], spec, None)["waste_unused_memory_gib_seconds"]
    115200.0
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..backends.base import RELAUNCH_REASONS, FailureReason, ResourceUsage, StepState
from ..errors import ConfigError, check_keys, config_number
from ..spec import ComputeSpec

GiB = 2**30
MONEY_DIGITS = 6  # a seconds-long step on a CPU costs millionths
_KEYS = ("cpu_hour", "memory_gib_hour", "gpu_hour", "gpu_hour_by_type", "preemptible_factor")
_CURRENCY = "currency"
_OVERRIDES = ("backends", "tenants")  # sections of prices of their own
# what waste is split into: how an attempt ended, its waiting, and memory measured unused
CAUSES = ("oom_killed", "interrupted", "gang_waiting", "quota_idle", "unused_memory")
WASTE_CAUSES = {  # a finished attempt's reason → the waste it counts as
    FailureReason.OOM_KILLED.value: "oom_killed",
    **{reason.value: "interrupted" for reason in RELAUNCH_REASONS},
}


@dataclass(frozen=True)
class Prices:
    """Per-hour prices of what a step reserves (`prices` in the executor config)."""

    cpu_hour: float = 0.0  # per CPU-hour
    memory_gib_hour: float = 0.0  # per GiB-hour
    gpu_hour: float = 0.0  # per GPU-hour of a GPU whose model has no price of its own
    gpu_hour_by_type: Mapping[str, float] = field(default_factory=dict)  # per `gpu_type`
    preemptible_factor: float = 1.0  # × the price of a `preemptible=True` step (spot capacity)
    currency: str = "USD"  # only a label in the figures
    # where a backend's or a tenant's capacity costs otherwise: the keys of its own that
    # replace these (a tenant's replace its backend's too), as given in the config
    backends: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    tenants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    given: Mapping[str, Any] = field(default_factory=dict)  # the section's own keys

    @classmethod
    def from_config(cls, raw: Any, where: str = "prices") -> Prices | None:
        """The checked section; None when absent. `ConfigError` names the key and the fix.

        `backends` and `tenants` map a name to keys of its own that replace the section's (in
        the section's currency) for the steps on that backend or in that tenant.

        Example:
            >>> prices = Prices.from_config({"cpu_hour": 0.04, "gpu_hour": 2.0,
            ...     "backends": {"slurm": {"gpu_hour": 1.2}},
            ...     "tenants": {"team-a": {"cpu_hour": 0.03}}})
            >>> on_prem = prices.for_step("slurm", None)
            >>> on_prem.cpu_hour, on_prem.gpu_hour, prices.for_step("kubernetes", "team-a").cpu_hour
            (0.04, 1.2, 0.03)
        """
        if raw is None:
            return None
        check_keys(raw, (*_KEYS, _CURRENCY, *_OVERRIDES), where)
        given = {key: raw[key] for key in (*_KEYS, _CURRENCY) if key in raw}
        prices = cls._parsed(given, where)
        overrides: dict[str, dict[str, Mapping[str, Any]]] = {}
        for section in _OVERRIDES:
            named = raw.get(section) or {}
            if not isinstance(named, Mapping):
                raise ConfigError(
                    f"{where}.{section} must map a {section[:-1]} name to its own prices, e.g. "
                    "{team-a: {cpu_hour: 0.03}}"
                )
            overrides[section] = {}
            for name, own in named.items():
                at = f"{where}.{section}.{name}"
                check_keys(own, _KEYS, at)  # one currency for the whole section
                cls._parsed({**given, **own}, at)  # its errors now, named where they are
                overrides[section][str(name)] = dict(own)
        return replace(
            prices, backends=overrides["backends"], tenants=overrides["tenants"], given=given
        )

    def for_step(self, backend: str, tenant: str | None) -> Prices:
        """The prices of a step on `backend` in `tenant`: the section's keys, replaced by its
        backend's own, replaced by its tenant's own."""
        own = {**self.backends.get(backend, {}), **self.tenants.get(tenant or "", {})}
        return self._parsed({**self.given, **own}, "prices") if own else self

    @classmethod
    def _parsed(cls, raw: Mapping[str, Any], where: str) -> Prices:
        by_type = raw.get("gpu_hour_by_type") or {}
        if not isinstance(by_type, Mapping):
            raise ConfigError(
                f"{where}.gpu_hour_by_type must map a gpu_type to its price per GPU-hour, e.g. "
                "{h100: 4.0}"
            )
        factor = config_number(raw.get("preemptible_factor", 1.0), f"{where}.preemptible_factor")
        if not 0 < factor <= 1:
            raise ConfigError(
                f"{where}.preemptible_factor={factor!r}: preemptible capacity costs a fraction "
                "of the on-demand price; give a number in (0, 1], e.g. 0.35"
            )
        currency = raw.get(_CURRENCY, "USD")
        if not isinstance(currency, str) or not currency.strip():
            raise ConfigError(f"{where}.currency={currency!r}: give a label such as USD or EUR")
        return Prices(
            cpu_hour=_price(raw, "cpu_hour", where),
            memory_gib_hour=_price(raw, "memory_gib_hour", where),
            gpu_hour=_price(raw, "gpu_hour", where),
            gpu_hour_by_type={
                str(model): config_number(price, f"{where}.gpu_hour_by_type.{model}")
                for model, price in by_type.items()
            },
            preemptible_factor=factor,
            currency=currency.strip(),
        )

    def of(self, usage: ResourceUsage, spec: ComputeSpec) -> float:
        """What one attempt's reservation costs."""
        gpu = self.gpu_hour_by_type.get(spec.gpu_type or "", self.gpu_hour)
        hourly = (
            usage.cpu_seconds * self.cpu_hour
            + usage.memory_gib_seconds * self.memory_gib_hour
            + usage.gpu_seconds * gpu
        ) / 3600
        return hourly * (self.preemptible_factor if spec.preemptible else 1.0)


def step_prices(prices: Prices | None, backend: str, tenant: str | None) -> Prices | None:
    """`prices.for_step(backend, tenant)`; None without prices."""
    return None if prices is None else prices.for_step(backend, tenant)


def _price(raw: Mapping[str, Any], key: str, where: str) -> float:
    return config_number(raw.get(key, 0.0), f"{where}.{key}")


def ended(state: StepState, reason: FailureReason | None) -> str:
    """What a finished attempt's `ResourceUsage.ended` records: the reason of a failed one."""
    return reason.value if state is StepState.FAILED and reason is not None else ""


def step_costs(
    attempts: Sequence[ResourceUsage], spec: ComputeSpec, prices: Prices | None
) -> dict[str, Any]:
    """The step's waste over its finished attempts in CPU-, GiB- and GPU-seconds (metadata
    values) and, with `prices`, its cost and the waste's. Each attempt's reservation is split
    once (`_parts`): what it ran, which its ending may waste, its gang ranks' waiting and its
    quota held idle."""
    waste: dict[str, list[ResourceUsage]] = {c: [] for c in CAUSES if c != "unused_memory"}
    unused: list[float] = []
    for attempt in attempts:
        ran, waiting, idle = _parts(attempt, spec.nodes)
        cause = WASTE_CAUSES.get(attempt.ended)
        if cause is not None:
            waste[cause].append(_redone(ran) if cause == "interrupted" else ran)
        waste["gang_waiting"].append(waiting)
        waste["quota_idle"].append(idle)
        if attempt.max_rss_bytes:
            unused.append(_unused_memory(ran, spec.nodes))
    figures: dict[str, Any] = {}
    for cause, used in waste.items():
        figures.update(_seconds(f"waste_{cause}", used))
    if unused:
        figures["waste_unused_memory_gib_seconds"] = round(sum(unused), 2)
    if prices is None:
        return figures
    figures["cost"] = round(sum(prices.of(a, spec) for a in attempts), MONEY_DIGITS)
    figures["currency"] = prices.currency
    for cause, used in waste.items():
        figures[f"waste_{cause}_cost"] = round(sum(prices.of(u, spec) for u in used), MONEY_DIGITS)
    if unused:
        memory_only = ResourceUsage(memory_gib_seconds=sum(unused))
        figures["waste_unused_memory_cost"] = round(prices.of(memory_only, spec), MONEY_DIGITS)
    return figures


def work_since_save(
    saved_at: float | None, ran_from: float | None, ended_at: float
) -> float | None:
    """The seconds of an interrupted attempt's work its relaunch redoes, from its checkpoint's
    last save (all unix times): `ended_at - saved_at` when it saved while it ran (from
    `ran_from`); None (all of it) when it saved nothing in that time.

    Example:
        >>> work_since_save(saved_at=1030.0, ran_from=1000.0, ended_at=1042.5)
        12.5
        >>> work_since_save(saved_at=990.0, ran_from=1000.0, ended_at=1042.5) is None
        True
    """
    if saved_at is None or ran_from is None or saved_at < ran_from:
        return None
    return max(0.0, ended_at - saved_at)


def _redone(usage: ResourceUsage) -> ResourceUsage:
    """The part of an interrupted attempt its relaunch redoes: its work since its checkpoint
    (`lost_seconds`) out of its wall time; all of it when the step did not say."""
    if usage.lost_seconds is None or not usage.wall_seconds:
        return usage
    return _share(usage, min(1.0, usage.lost_seconds / usage.wall_seconds))


def _parts(usage: ResourceUsage, nodes: int) -> tuple[ResourceUsage, ResourceUsage, ResourceUsage]:
    """An attempt's reservation split by node-seconds into what it ran (its wall time on every
    node, with its other fields), what its gang ranks held while the others were not running
    yet, and what it held of its quota before it ran (Kueue admitted it, its pods waited).

    Example:
        >>> gang = ResourceUsage(cpu_seconds=120.0, wall_seconds=20.0, waiting_node_seconds=10.0,
        ...     quota_idle_seconds=5.0)
        >>> [part.cpu_seconds for part in _parts(gang, nodes=2)]
        [80.0, 20.0, 20.0]
    """
    ran = nodes * usage.wall_seconds
    held = ran + usage.waiting_node_seconds + nodes * usage.quota_idle_seconds
    if not held:
        return usage, ResourceUsage(), ResourceUsage()
    return (
        replace(_share(usage, ran / held), wall_seconds=usage.wall_seconds),
        _share(usage, usage.waiting_node_seconds / held),
        _share(usage, nodes * usage.quota_idle_seconds / held),
    )


def _share(usage: ResourceUsage, share: float) -> ResourceUsage:
    """`share` of the attempt's reservation (and wall time); its other fields kept."""
    return replace(
        usage,
        cpu_seconds=usage.cpu_seconds * share,
        memory_gib_seconds=usage.memory_gib_seconds * share,
        gpu_seconds=usage.gpu_seconds * share,
        wall_seconds=usage.wall_seconds * share,
    )


def _unused_memory(ran: ResourceUsage, nodes: int) -> float:
    """GiB-seconds reserved above the measured peak (per node, for each of a gang's nodes;
    requested GiB per node = GiB-s / wall / nodes), over what the attempt ran."""
    if not ran.wall_seconds or ran.max_rss_bytes is None:
        return 0.0
    requested_gib = ran.memory_gib_seconds / ran.wall_seconds / nodes
    return max(0.0, requested_gib - ran.max_rss_bytes / GiB) * ran.wall_seconds * nodes


def _seconds(prefix: str, used: Sequence[ResourceUsage]) -> dict[str, float]:
    return {
        f"{prefix}_cpu_seconds": round(sum(u.cpu_seconds for u in used), 2),
        f"{prefix}_memory_gib_seconds": round(sum(u.memory_gib_seconds for u in used), 2),
        f"{prefix}_gpu_seconds": round(sum(u.gpu_seconds for u in used), 2),
    }
