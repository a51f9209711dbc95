"""Budgets: a step or a run that would cost more than its cap is refused before anything is
submitted, and one that passes a cap while it runs is warned about or stopped (`on_exceeded`).
Pure: what a step's earlier runs took, or what the run's steps have reserved so far, comes in;
a verdict per step goes out.

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

While the run goes on, what each step has reserved so far (`spent`) is held to the same caps:
    >>> so_far = {"train": Spent(cost=5.5, gpu_hours=1.4), "eval": Spent(cost=0.2, gpu_hours=0.0)}
    >>> passed("train", so_far, budget, "USD")
    {'max_cost_per_step': 'has reserved 5.50 USD so far, past budget.max_cost_per_step 5.00 USD'}
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..backends.base import ResourceUsage
from ..errors import ConfigError, check_keys, config_number
from ..spec import ComputeSpec
from .cost import MONEY_DIGITS, Prices

_CAPS = ("max_cost_per_step", "max_cost_per_run", "max_gpu_hours_per_step", "max_gpu_hours_per_run")
_MONEY_CAPS = ("max_cost_per_step", "max_cost_per_run")
# what a running step that passes a cap meets: a warning, or a stop at its next checkpoint
ON_EXCEEDED = ("warn", "stop")


@dataclass(frozen=True)
class Budget:
    """The caps of `budget` in the executor config; None: no cap of that kind."""

    max_cost_per_step: float | None = None  # in the prices' currency
    max_cost_per_run: float | None = None
    max_gpu_hours_per_step: float | None = None  # GPU-hours, with or without prices
    max_gpu_hours_per_run: float | None = None
    on_exceeded: str = "warn"  # a running step past a cap: "warn" once, or "stop" it

    @classmethod
    def from_config(cls, raw: Any, prices: Prices | None, where: str = "budget") -> Budget | None:
        """The checked section; None when absent. `ConfigError` names the key and the fix."""
        if raw is None:
            return None
        check_keys(raw, (*_CAPS, "on_exceeded"), where)
        on_exceeded = raw.get("on_exceeded") or "warn"
        if on_exceeded not in ON_EXCEEDED:
            raise ConfigError(
                f"{where}.on_exceeded={on_exceeded!r}: give 'warn' (a running step that passes a "
                "cap is warned about once) or 'stop' (it is stopped at its next checkpoint and "
                "fails with BudgetError)"
            )
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
        return cls(**caps, on_exceeded=on_exceeded)

    def caps(self, currency: str) -> tuple[tuple[str, float | None, float | None, str], ...]:
        """(figure, per-step cap, per-run cap, unit) for money and for GPU-hours."""
        return (
            ("cost", self.max_cost_per_step, self.max_cost_per_run, currency),
            ("gpu_hours", self.max_gpu_hours_per_step, self.max_gpu_hours_per_run, "GPU-hours"),
        )


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
    for name, step_cap, run_cap, unit in budget.caps(currency):
        figures = _figures(estimates, name)
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


@dataclass(frozen=True)
class Spent:
    """What a step has reserved so far, all its attempts (the one running up to now)."""

    cost: float | None  # at its prices; None without prices
    gpu_hours: float


NOTHING = Spent(cost=None, gpu_hours=0.0)
REST_OF_RUN = ""  # the key of the rest of the run taken as one, beside one step's own figure


def _combined(a: Spent, b: Spent, factor: float = 1.0) -> Spent:
    """a + factor × b, figure by figure (a cost None in both stays None)."""
    both_unpriced = a.cost is None and b.cost is None
    cost = None if both_unpriced else (a.cost or 0.0) + factor * (b.cost or 0.0)
    return Spent(cost, a.gpu_hours + factor * b.gpu_hours)


@dataclass
class RunTally:
    """The rest of the run's reservation beside one step, without going over every step of
    the run at each step's check: the figures of all steps are read (`read`) at most once
    every `refresh_s` of the caller's clock, and carried forward in between at the rate they
    were reserving then. A step that started or ended since the last read counts from the
    next one (so a run cap is seen at most `refresh_s` late).

    Example:
        >>> tally = RunTally(refresh_s=10.0)
        >>> figures = {"a": (Spent(4.0, 0.0), Spent(0.5, 0.0)), "b": (Spent(3.0, 0.0),
        ...            Spent(0.25, 0.0))}
        >>> tally.rest("a", 100.0, lambda: figures)  # b: 3.0 so far, 0.25 a second
        (Spent(cost=3.0, gpu_hours=0.0), Spent(cost=0.25, gpu_hours=0.0))
        >>> tally.rest("a", 104.0, lambda: {})  # not read again: carried forward 4 s
        (Spent(cost=4.0, gpu_hours=0.0), Spent(cost=0.25, gpu_hours=0.0))
    """

    refresh_s: float = 1.0
    _read_at: float = float("-inf")
    _steps: dict[str, tuple[Spent, Spent]] = field(default_factory=dict)  # (so far, a second)
    _total: Spent = NOTHING
    _rate: Spent = NOTHING

    def rest(
        self, step: str, now: float, read: Callable[[], Mapping[str, tuple[Spent, Spent]]]
    ) -> tuple[Spent, Spent]:
        """What the run's other steps have reserved by `now`, and reserve a second."""
        if now - self._read_at >= self.refresh_s:
            self._steps, self._read_at = dict(read()), now
            self._total = self._rate = NOTHING
            for so_far, per_second in self._steps.values():
                self._total = _combined(self._total, so_far)
                self._rate = _combined(self._rate, per_second)
        own, own_rate = self._steps.get(step, (NOTHING, NOTHING))
        rate = _combined(self._rate, own_rate, -1.0)
        rest = _combined(_combined(self._total, own, -1.0), rate, now - self._read_at)
        return _floor(rest), _floor(rate)


def _floor(figures: Spent) -> Spent:
    """No figure below zero (what a subtraction of floats may leave)."""
    cost = None if figures.cost is None else max(0.0, figures.cost)
    return Spent(cost, max(0.0, figures.gpu_hours))


def spent(attempts: Sequence[ResourceUsage], spec: ComputeSpec, prices: Prices | None) -> Spent:
    """The `Spent` of a step's attempts, each priced as its summary prices it."""
    cost = None if prices is None else sum(prices.of(u, spec) for u in attempts)
    return Spent(cost, sum(u.gpu_seconds for u in attempts) / 3600)


def passed(step: str, so_far: Mapping[str, Spent], budget: Budget, currency: str) -> dict[str, str]:
    """The caps `step` has passed while running, by cap key, with what passing it says: its
    own reservation over a per-step cap, or the run's (`so_far`: every step of the run that
    reserved anything, this one too) over a per-run cap."""
    found: dict[str, str] = {}
    for name, step_cap, run_cap, unit in budget.caps(currency):
        figures = _figures(so_far, name)
        value = figures.get(step)
        if value is None:
            continue
        if step_cap is not None and value > step_cap:
            key = f"max_{name}_per_step"
            found[key] = (
                f"has reserved {value:.2f} {unit} so far, past budget.{key} {step_cap:.2f} {unit}"
            )
        total = sum(figures.values())
        if run_cap is not None and total > run_cap:
            key = f"max_{name}_per_run"
            found[key] = (
                f"the run has reserved {total:.2f} {unit} so far (this step {value:.2f}), past "
                f"budget.{key} {run_cap:.2f} {unit}"
            )
    return found


def seconds_to_cap(
    step: str,
    so_far: Mapping[str, Spent],
    per_second: Mapping[str, Spent],
    budget: Budget,
    currency: str,
) -> float:
    """How long until `step` passes a cap if the run's steps go on reserving what they hold
    now (`per_second`: each running step's reservation per second); inf when no cap binds.

    Example:
        >>> budget = Budget(max_cost_per_step=5.0, max_cost_per_run=8.0)
        >>> so_far = {"a": Spent(cost=4.0, gpu_hours=0.0), "b": Spent(cost=3.0, gpu_hours=0.0)}
        >>> rates = {"a": Spent(cost=0.5, gpu_hours=0.0), "b": Spent(cost=0.5, gpu_hours=0.0)}
        >>> seconds_to_cap("a", so_far, rates, budget, "USD")  # the run's 1.0 left, at 1.0/s
        1.0
    """
    soonest = float("inf")
    for name, step_cap, run_cap, _unit in budget.caps(currency):
        figures, rates = _figures(so_far, name), _figures(per_second, name)
        value, rate = figures.get(step), rates.get(step, 0.0)
        if value is not None and step_cap is not None and rate > 0:
            soonest = min(soonest, (step_cap - value) / rate)
        run_rate = sum(rates.values())
        if value is not None and run_cap is not None and run_rate > 0:
            soonest = min(soonest, (run_cap - sum(figures.values())) / run_rate)
    return max(0.0, soonest)


@dataclass
class CapWatch:
    """What a running step past its caps meets under `budget.on_exceeded`: each cap's warning
    once per step, or its stop. One per run (the executor) or per program (`AICompute`).

    Example:
        >>> watch = CapWatch(Budget(max_gpu_hours_per_step=1.0), "")
        >>> watch.verdict("train", {"train": Spent(cost=None, gpu_hours=1.2)})
        ([('max_gpu_hours_per_step', 'has reserved 1.20 GPU-hours so far, past \
budget.max_gpu_hours_per_step 1.00 GPU-hours; it goes on (budget.on_exceeded: warn)')], '')
        >>> watch.verdict("train", {"train": Spent(cost=None, gpu_hours=1.3)})  # said once
        ([], '')
    """

    budget: Budget
    currency: str
    _said: set[tuple[str, str]] = field(default_factory=set)  # (step, cap) warned about

    def verdict(self, step: str, so_far: Mapping[str, Spent]) -> tuple[list[tuple[str, str]], str]:
        """(cap key, warning) for each cap `step` passed that was not warned about yet, and
        why it is stopped ("" unless `on_exceeded` is stop and a cap is passed)."""
        found = passed(step, so_far, self.budget, self.currency)
        if found and self.budget.on_exceeded == "stop":
            return [], (
                f"{'; '.join(found.values())}; stopped at its next checkpoint "
                "(budget.on_exceeded: stop); raise the cap, or make the step smaller"
            )
        new = [(cap, why) for cap, why in found.items() if (step, cap) not in self._said]
        self._said.update((step, cap) for cap, _ in new)
        return [(cap, f"{why}; it goes on (budget.on_exceeded: warn)") for cap, why in new], ""


def _figures(by_step: Mapping[str, Estimate] | Mapping[str, Spent], name: str) -> dict[str, float]:
    """Each step's `name` figure ("cost" or "gpu_hours"), leaving out the steps without it."""
    return {
        step: value for step, held in by_step.items() if (value := getattr(held, name)) is not None
    }


__all__ = [
    "NOTHING",
    "ON_EXCEEDED",
    "REST_OF_RUN",
    "Budget",
    "CapWatch",
    "RunTally",
    "Estimate",
    "Spent",
    "estimate",
    "over_budget",
    "passed",
    "spent",
]
