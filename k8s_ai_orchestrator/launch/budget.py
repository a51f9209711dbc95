"""Budgets: a step or a run that would cost more than its cap is refused before anything is
submitted. Pure: what a step's earlier runs took comes in, a verdict per step goes out.

A step's estimate is its declared size (every node of a gang) held for as long as the longest
of its recent runs took, all attempts together (`Estimate.how` says which run); at `prices`
that is money, and it is GPU-hours in any case. A step with no earlier run has no estimate and
is never refused for its budget (the run-start note says so). `memory="auto"` / `cpu="auto"`
are estimated at their first-run size (`memory_default` / `cpu_default`), not at the size the
step's history will give them at launch.

Example:
    >>> prices = Prices(cpu_hour=0.04, memory_gib_hour=0.005, gpu_hour=2.0)
    >>> budget = Budget.from_config({"max_cost_per_step": 5.0}, prices)
    >>> spec = ComputeSpec(cpu=8, memory_bytes=64 * 2**30, gpu=1)
    >>> guess = estimate("train", spec, [("0a1b2c3d-run", 5400.0)], prices)
    >>> guess.cost, guess.how
    (3.96, 'the longest of its last 1 run(s) took 5400 s (run 0a1b2c3d)')
    >>> over_budget({"train": guess}, budget, "USD")
    {}
    >>> from dataclasses import replace
    >>> over_budget({"train": replace(guess, cost=7.5)}, budget, "USD")["train"][0][:66]
    'estimated at 7.50 USD, over budget.max_cost_per_step 5.00 USD: the'
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends.base import ResourceUsage
from ..errors import ConfigError, check_keys, config_number
from ..spec import ComputeSpec
from .cost import MONEY_DIGITS, Prices

_CAPS = ("max_cost_per_step", "max_cost_per_run", "max_gpu_hours_per_step", "max_gpu_hours_per_run")
_MONEY_CAPS = ("max_cost_per_step", "max_cost_per_run")


@dataclass(frozen=True)
class Budget:
    """The caps of `budget` in the executor config; None: no cap of that kind."""

    max_cost_per_step: float | None = None  # in the prices' currency
    max_cost_per_run: float | None = None
    max_gpu_hours_per_step: float | None = None  # GPU-hours, with or without prices
    max_gpu_hours_per_run: float | None = None

    @classmethod
    def from_config(cls, raw: Any, prices: Prices | None, where: str = "budget") -> Budget | None:
        """The checked section; None when absent. `ConfigError` names the key and the fix."""
        if raw is None:
            return None
        check_keys(raw, _CAPS, where)
        caps = {
            key: float(config_number(raw[key], f"{where}.{key}", above=True))
            for key in _CAPS
            if raw.get(key) is not None
        }
        priced = [key for key in caps if key in _MONEY_CAPS]
        if priced and prices is None:
            raise ConfigError(
                f"{where}.{priced[0]} is money, and the config has no prices: add a `prices` "
                "section (docs/cost.md), or cap GPU-hours with max_gpu_hours_per_step / "
                "max_gpu_hours_per_run"
            )
        return cls(**caps)


@dataclass(frozen=True)
class Estimate:
    """What one run of a step is expected to cost, and how that was worked out."""

    seconds: float  # how long its size is expected to be held
    how: str  # "the longest of its last 3 run(s) took 812 s (run 0a1b2c3d)"
    cost: float | None  # at the prices; None without prices
    gpu_hours: float


def estimate(
    step: str, spec: ComputeSpec, past: Sequence[tuple[str, float]], prices: Prices | None
) -> Estimate | None:
    """The estimate from `past` ((run id, seconds its size was held), newest first); None
    without history."""
    if not past:
        return None
    run_id, seconds = max(past, key=lambda run: run[1])
    usage = ResourceUsage.reserved(spec, seconds)
    how = f"the longest of its last {len(past)} run(s) took {seconds:.0f} s (run {run_id[:8]})"
    cost = None if prices is None else round(prices.of(usage, spec), MONEY_DIGITS)
    return Estimate(seconds, how, cost, usage.gpu_seconds / 3600)


def over_budget(
    estimates: Mapping[str, Estimate], budget: Budget, currency: str
) -> dict[str, list[str]]:
    """Why each step would exceed the budget (the steps that would not are absent): its own
    estimate over a per-step cap, or the run's total over a per-run cap (every estimated step
    is refused then, as nothing of the run is submitted)."""
    refused: dict[str, list[str]] = {}
    caps = (
        ("cost", budget.max_cost_per_step, budget.max_cost_per_run, currency),
        ("gpu_hours", budget.max_gpu_hours_per_step, budget.max_gpu_hours_per_run, "GPU-hours"),
    )
    for field, step_cap, run_cap, unit in caps:
        figures = {
            step: value
            for step, guess in estimates.items()
            if (value := getattr(guess, field)) is not None
        }
        name = "cost" if field == "cost" else "gpu_hours"
        for step, value in figures.items():
            if step_cap is not None and value > step_cap:
                refused.setdefault(step, []).append(
                    f"estimated at {value:.2f} {unit}, over budget.max_{name}_per_step "
                    f"{step_cap:.2f} {unit}: {estimates[step].how}; raise the cap, or make the "
                    "step smaller"
                )
        total = sum(figures.values())
        if run_cap is not None and total > run_cap:
            for step, value in figures.items():
                refused.setdefault(step, []).append(
                    f"the run is estimated at {total:.2f} {unit} ({len(figures)} step(s) with "
                    f"history; this one {value:.2f}), over budget.max_{name}_per_run "
                    f"{run_cap:.2f} {unit}; raise the cap, or run fewer partitions at once"
                )
    return refused


__all__ = ["Budget", "Estimate", "estimate", "over_budget"]
