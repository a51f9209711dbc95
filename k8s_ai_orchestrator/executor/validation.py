"""The run-start check: every step of the run, as it will be launched, before the first submit.

For each step it resolves the spec from the op tags, the tenant (against `allowed_tenants`)
and the backend; builds each backend the run touches (so its config is parsed); and asks the
backend to `validate` the step's launch request: on Kubernetes the tenant's kubeconfig or
vc-<name> secret, every name written into the Job, and the pre-flight (access, quota, largest
node); on Slurm the partition's limits. Nothing is created. Every problem of every step is
collected, so one error names them all; each keeps the class of the error that found it
(`ComputeSpecError`, `TenantAccessError`, ...), so the step's Dagster failure shows it.

Example:
    >>> from k8s_ai_orchestrator.errors import ConfigError, SubmitError
    >>> check = RunCheck()
    >>> check.refuse(
    ...     "mosaic", "step 'mosaic' (xl: 72 CPU / 450Gi) can never run in tenant 'a'", SubmitError
    ... )
    >>> check.refuse("tiles", "image_pull_policy='always' is not one of ...", ConfigError)
    >>> check.error_type("tiles").__name__
    'ConfigError'
    >>> print(check.error())  # doctest: +NORMALIZE_WHITESPACE
    2 steps of this run can never run as configured; nothing was submitted:
    - SubmitError: step 'mosaic' (xl: 72 CPU / 450Gi) can never run in tenant 'a'
    - ConfigError: step 'tiles': image_pull_policy='always' is not one of ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from dagster._core.execution.context.system import PlanOrchestrationContext

from ..backends.base import Backend, LaunchRequest, Validates
from ..errors import BudgetError, OrchestratorError, RunRefusedError
from ..launch.budget import estimate, over_budget
from ..launch.cost import Prices, step_prices
from ..launch.plan import PlannedStep
from ..launch.settings import ExecutorSettings
from .usage_history import load_step_walls


@dataclass
class RunCheck:
    """What the run-start check found: the steps' problems, in plan order."""

    problems: dict[str, list[str]] = field(default_factory=dict)
    kinds: dict[str, list[type[OrchestratorError]]] = field(default_factory=dict)  # of each
    notes: list[str] = field(default_factory=list)  # what the run's log is told at its start

    def refuse(
        self, step: str, message: str, kind: type[OrchestratorError] = OrchestratorError
    ) -> None:
        """Record a problem of `step` (each message once), found by an error of class `kind`."""
        found = self.problems.setdefault(step, [])
        if message not in found:
            found.append(message)
            self.kinds.setdefault(step, []).append(kind)

    def error_type(self, step: str) -> type[OrchestratorError]:
        """The error class of the step's first problem: the class its Dagster failure shows."""
        return self.kinds[step][0]

    def step_message(self, step: str) -> str:
        """The step's problems as one sentence-per-problem message naming the step."""
        return "; ".join(_naming(step, message) for message in self.problems[step])

    def error(self) -> RunRefusedError:
        """One error naming every refused step and each of its problems."""
        lines = [
            f"{kind.__name__}: {_naming(step, message)}"
            for step, found in self.problems.items()
            for message, kind in zip(found, self.kinds[step], strict=True)
        ]
        count = len(self.problems)
        return RunRefusedError(
            f"{count} step{'s' if count > 1 else ''} of this run can never run as configured; "
            "nothing was submitted:\n" + "\n".join(f"- {line}" for line in lines),
            {step: tuple(found) for step, found in self.problems.items()},
        )


def check_run(
    steps: Iterable[tuple[str, Mapping[str, str]]],
    plan: Callable[[str, Mapping[str, str]], PlannedStep],
    backend: Callable[[str], Backend],
    request: Callable[[PlannedStep, Mapping[str, str]], LaunchRequest],
    resumed: bool = False,
) -> tuple[dict[str, PlannedStep], RunCheck]:
    """Plan and validate every step; returns the planned steps and what was refused.

    Args:
        steps: (step key, op tags) of every step of the run's execution plan.
        plan: resolves a step's spec, tenant and backend (raises `OrchestratorError`).
        backend: the backend of that name, built on first use (its config parsed).
        request: the launch request of the step's first attempt.
        resumed: a resumed run worker's check: every step is planned and its backend built,
            but no backend validates it again (the run's steps passed at its start, with the
            same config, and some are running: a pre-flight now would only delay taking
            them over).
    """
    check = RunCheck()
    planned: dict[str, PlannedStep] = {}
    tags_of = dict(steps)
    for key, tags in tags_of.items():
        try:
            planned[key] = plan(key, tags)
        except OrchestratorError as error:
            check.refuse(key, str(error), type(error))
    backends: dict[str, Backend | None] = {}
    for key, step in planned.items():
        if step.backend not in backends:
            backends[step.backend] = _build(step.backend, backend, check, planned)
        built = backends[step.backend]
        if resumed or not isinstance(built, Validates):
            continue
        try:
            built.validate(request(step, tags_of[key]))
        except OrchestratorError as error:
            check.refuse(key, str(error), type(error))
    return planned, check


def check_budget(
    check: RunCheck,
    planned: Mapping[str, PlannedStep],
    settings: ExecutorSettings,
    context: PlanOrchestrationContext,
) -> RunCheck:
    """Refuse (`BudgetError`) each step the `budget` refuses (`launch.budget.over_budget`),
    estimated from the job's earlier runs in the instance (`usage_history.load_step_walls`);
    note what was estimated. Without a budget nothing is read; a resumed run worker reads
    nothing either: the run passed its budget at its start, and its steps may be running."""
    budget = settings.budget
    if budget is None or context.resume_from_failure:
        return check
    walls = load_step_walls(context.instance, context.dagster_run, settings.auto_sizing.runs)

    def priced(step: PlannedStep) -> Prices | None:
        return step_prices(settings.prices, step.backend, step.tenant)

    estimates = {
        key: guess
        for key, step in planned.items()
        if key not in check.problems
        and (guess := estimate(key, step.spec, walls.get(key, ()), priced(step)))
    }
    currency = settings.prices.currency if settings.prices else ""
    for key, reasons in over_budget(estimates, budget, currency).items():
        for reason in reasons:
            check.refuse(key, reason, BudgetError)
    cost = sum(guess.cost or 0.0 for guess in estimates.values())
    money = f"{cost:.2f} {currency}, " if settings.prices else ""
    gpu_hours = sum(guess.gpu_hours for guess in estimates.values())
    unknown = len(planned) - len(estimates)
    check.notes.append(
        f"Budget: {len(estimates)} step(s) estimated at {money}{gpu_hours:.2f} GPU-hours from "
        f"earlier runs; {unknown} step(s) without history are not estimated (docs/cost.md)"
    )
    return check


def _build(
    name: str,
    backend: Callable[[str], Backend],
    check: RunCheck,
    planned: Mapping[str, PlannedStep],
) -> Backend | None:
    """The backend, or None after refusing every step routed to it (its config is invalid)."""
    try:
        return backend(name)
    except OrchestratorError as error:
        for key, step in planned.items():
            if step.backend == name:
                message = f"routed to the {name} backend, whose config is invalid: {error}"
                check.refuse(key, message, type(error))
        return None


def _naming(step: str, message: str) -> str:
    """The message, prefixed with the step unless it already names it."""
    return message if f"'{step}'" in message else f"step '{step}': {message}"


__all__ = ["RunCheck", "check_budget", "check_run"]
