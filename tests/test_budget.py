"""Budgets: caps on a step's and a run's estimate, checked before anything is submitted.

The end-to-end refusal (real instance, real step processes, nothing submitted) is in
`tests/local/test_local_executor.py`.
"""

from __future__ import annotations

import pytest

from k8s_ai_orchestrator.errors import ConfigError
from k8s_ai_orchestrator.launch.budget import (
    REST_OF_RUN,
    Budget,
    Estimate,
    RunTally,
    Spent,
    estimate,
    over_budget,
    passed,
    seconds_to_cap,
)
from k8s_ai_orchestrator.launch.cost import Prices
from k8s_ai_orchestrator.launch.settings import ExecutorSettings
from k8s_ai_orchestrator.spec import ComputeSpec, GiB

PRICES = Prices(cpu_hour=1.0, memory_gib_hour=0.0, gpu_hour=10.0)


@pytest.mark.parametrize(
    ("raw", "prices", "fragment"),
    [
        ({"max_cost_per_step": 5}, None, "budget.max_cost_per_step is money, and the config has "),
        ({"max_cost_per_run": 5}, None, "cap GPU-hours with max_gpu_hours_per_step"),
        ({"max_gpu_hours_per_run": 0}, None, "budget.max_gpu_hours_per_run=0"),
        ({"max_cost_per_step": -1}, PRICES, "budget.max_cost_per_step=-1"),
        ({"max_cost": 5}, PRICES, "unknown key(s) ['max_cost']"),
    ],
)
def test_a_bad_budget_is_a_config_error_naming_the_key_and_the_fix(
    raw: dict[str, float], prices: Prices | None, fragment: str
) -> None:
    with pytest.raises(ConfigError) as error:
        Budget.from_config(raw, prices)
    assert fragment in str(error.value)


def test_the_executor_config_reads_the_budget_after_its_prices() -> None:
    settings = ExecutorSettings.from_config(
        {"prices": {"cpu_hour": 0.04}, "budget": {"max_cost_per_run": 50}}
    )
    assert settings.budget == Budget(max_cost_per_run=50.0)
    with pytest.raises(ConfigError, match="executor config: budget.max_cost_per_run is money"):
        ExecutorSettings.from_config({"budget": {"max_cost_per_run": 50}})
    assert ExecutorSettings.from_config({}).budget is None
    gpu_only = ExecutorSettings.from_config({"budget": {"max_gpu_hours_per_step": 8}})
    assert gpu_only.budget == Budget(max_gpu_hours_per_step=8.0)


def test_a_step_is_estimated_from_its_longest_recent_run_at_its_whole_size() -> None:
    gang = ComputeSpec(cpu=4, memory_bytes=8 * GiB, gpu=2, nodes=2)
    past = [("run-newest", 1800.0), ("run-slowest", 3600.0), ("run-older", 900.0)]
    guess = estimate("train", gang, past, PRICES)
    assert guess is not None
    # 2 nodes × (4 CPU × 1 + 2 GPU × 10) per hour, for the slowest run's hour
    assert (guess.seconds, guess.cost, guess.gpu_hours) == (3600.0, 48.0, 4.0)
    assert guess.how == "the longest of its last 3 run(s) took 3600 s (run run-slow)"
    assert estimate("train", gang, [], PRICES) is None  # no history: never refused
    unpriced = estimate("train", gang, past, None)
    assert unpriced is not None and (unpriced.cost, unpriced.gpu_hours) == (None, 4.0)


def guess(cost: float | None, gpu_hours: float = 0.0) -> Estimate:
    return Estimate(
        60.0, "the longest of its last 1 run(s) took 60 s (run 0a1b2c3d)", cost, gpu_hours
    )


def test_a_step_over_its_cap_is_refused_with_its_estimate_how_and_the_fix() -> None:
    refused = over_budget(
        {"small": guess(1.0), "big": guess(7.5)}, Budget(max_cost_per_step=5.0), "USD"
    )
    assert list(refused) == ["big"]
    (why,) = refused["big"]
    assert why == (
        "estimated at 7.50 USD, over budget.max_cost_per_step 5.00 USD: the longest of its last "
        "1 run(s) took 60 s (run 0a1b2c3d); raise the cap, or make the step smaller"
    )


def test_a_run_over_its_cap_refuses_every_estimated_step() -> None:
    estimates = {"a": guess(30.0, 2.0), "b": guess(25.0, 1.0)}
    refused = over_budget(estimates, Budget(max_cost_per_run=50.0), "EUR")
    assert sorted(refused) == ["a", "b"]
    assert refused["a"][0].startswith(
        "the run is estimated at 55.00 EUR (2 step(s) with history; this one 30.00), over "
        "budget.max_cost_per_run 50.00 EUR"
    )
    assert over_budget(estimates, Budget(max_cost_per_run=55.0), "EUR") == {}  # at the cap


def test_gpu_hours_are_capped_with_or_without_prices() -> None:
    estimates = {"train": guess(None, 9.0), "score": guess(None, 0.5)}
    refused = over_budget(estimates, Budget(max_gpu_hours_per_step=8.0), "")
    assert list(refused) == ["train"]
    assert refused["train"][0].startswith(
        "estimated at 9.00 GPU-hours, over budget.max_gpu_hours_per_step 8.00 GPU-hours"
    )
    by_run = over_budget(estimates, Budget(max_gpu_hours_per_run=9.0), "")
    assert sorted(by_run) == ["score", "train"]


def test_on_exceeded_is_warn_by_default_and_anything_but_warn_or_stop_is_a_config_error() -> None:
    assert Budget.from_config({"max_gpu_hours_per_step": 1}, None) == Budget(
        max_gpu_hours_per_step=1.0, on_exceeded="warn"
    )
    stop = Budget.from_config({"max_gpu_hours_per_step": 1, "on_exceeded": "stop"}, None)
    assert stop is not None and stop.on_exceeded == "stop"
    with pytest.raises(ConfigError, match=r"budget.on_exceeded='kill': give 'warn' \(a running"):
        Budget.from_config({"max_gpu_hours_per_step": 1, "on_exceeded": "kill"}, None)


def test_a_running_step_passes_its_own_cap_or_the_runs_and_says_which() -> None:
    so_far = {"a": Spent(cost=4.0, gpu_hours=1.5), "b": Spent(cost=3.0, gpu_hours=0.0)}
    assert passed("a", so_far, Budget(max_cost_per_step=5.0), "EUR") == {}
    assert passed("a", so_far, Budget(max_gpu_hours_per_step=1.0), "") == {
        "max_gpu_hours_per_step": "has reserved 1.50 GPU-hours so far, past "
        "budget.max_gpu_hours_per_step 1.00 GPU-hours"
    }
    by_run = passed("b", so_far, Budget(max_cost_per_run=6.0), "EUR")
    assert by_run == {
        "max_cost_per_run": "the run has reserved 7.00 EUR so far (this step 3.00), past "
        "budget.max_cost_per_run 6.00 EUR"
    }
    unpriced = {"a": Spent(cost=None, gpu_hours=0.0)}
    assert passed("a", unpriced, Budget(max_cost_per_step=0.5), "EUR") == {}


def test_the_next_budget_look_is_when_the_first_cap_would_be_passed_at_the_current_rate() -> None:
    so_far = {"a": Spent(cost=1.0, gpu_hours=0.5), "b": Spent(cost=2.0, gpu_hours=0.0)}
    rates = {"a": Spent(cost=0.5, gpu_hours=0.001), "b": Spent(cost=0.25, gpu_hours=0.0)}
    assert seconds_to_cap("a", so_far, rates, Budget(max_cost_per_step=3.0), "EUR") == 4.0
    run_cap = Budget(max_cost_per_step=3.0, max_cost_per_run=4.5)
    assert seconds_to_cap("a", so_far, rates, run_cap, "EUR") == 2.0  # 1.5 left at 0.75/s
    gpu = Budget(max_gpu_hours_per_step=0.6)
    assert seconds_to_cap("a", so_far, rates, gpu, "") == pytest.approx(100.0)
    assert seconds_to_cap("b", so_far, rates, gpu, "") == float("inf")  # holds no GPU
    assert seconds_to_cap("a", so_far, rates, Budget(max_cost_per_step=0.5), "EUR") == 0.0


def test_a_run_cap_reads_the_runs_steps_once_a_second_whatever_the_fan_out() -> None:
    reads = []
    steps = {f"s{n}": (Spent(1.0, 0.1), Spent(0.01, 0.0)) for n in range(1000)}

    def read() -> dict[str, tuple[Spent, Spent]]:
        reads.append(1)
        return steps

    tally = RunTally(refresh_s=1.0)
    rests = [tally.rest(key, 50.0, read) for key in steps]
    assert len(reads) == 1
    assert rests[0] == (Spent(999.0, pytest.approx(99.9)), Spent(pytest.approx(9.99), 0.0))
    later, _ = tally.rest("s0", 50.5, read)  # carried forward half a second at 9.99 a second
    assert len(reads) == 1 and later.cost == pytest.approx(999.0 + 9.99 / 2)
    tally.rest("s0", 51.0, read)
    assert len(reads) == 2


def test_a_run_cap_is_passed_by_the_rest_of_the_run_taken_as_one() -> None:
    so_far = {"a": Spent(3.0, 0.0), REST_OF_RUN: Spent(4.0, 0.0)}
    assert passed("a", so_far, Budget(max_cost_per_run=6.0), "EUR") == {
        "max_cost_per_run": "the run has reserved 7.00 EUR so far (this step 3.00), past "
        "budget.max_cost_per_run 6.00 EUR"
    }
    unpriced = RunTally().rest("a", 0.0, lambda: {"b": (Spent(None, 1.0), Spent(None, 0.0))})
    assert unpriced[0] == Spent(None, 1.0)
