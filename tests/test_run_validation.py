"""The run's check before its first submit (`executor.validation.check_run`): every step is
planned and validated by its backend; a resumed run worker plans them and validates none."""

from __future__ import annotations

from collections.abc import Mapping

from k8s_ai_orchestrator.backends.base import LaunchRequest
from k8s_ai_orchestrator.errors import SubmitError
from k8s_ai_orchestrator.executor.validation import RunCheck, check_run
from k8s_ai_orchestrator.launch.plan import PlannedStep
from k8s_ai_orchestrator.spec import resolve_spec


class RefusingBackend:
    """A backend whose pre-flight refuses every step (its cluster has no room)."""

    def __init__(self) -> None:
        self.validated: list[str] = []

    def validate(self, request: LaunchRequest) -> None:
        self.validated.append(request.step_key)
        raise SubmitError(f"step {request.step_key!r}: no node has 450Gi of memory")


def _check(backend: RefusingBackend, resumed: bool) -> tuple[dict[str, PlannedStep], RunCheck]:
    def plan(key: str, tags: Mapping[str, str]) -> PlannedStep:
        return PlannedStep(key, resolve_spec({"size": "xl"}), "kubernetes", "team-a")

    def request(step: PlannedStep, tags: Mapping[str, str]) -> LaunchRequest:
        return LaunchRequest("r1", step.key, 0, ["python"], {}, step.spec, step.tenant)

    steps = [("tiles", {}), ("mosaic", {})]
    return check_run(steps, plan, lambda name: backend, request, resumed)  # type: ignore[arg-type]


def test_a_run_at_its_start_is_validated_step_by_step_before_any_submit() -> None:
    backend = RefusingBackend()
    planned, check = _check(backend, resumed=False)
    assert backend.validated == ["tiles", "mosaic"]
    assert sorted(check.problems) == ["mosaic", "tiles"]
    assert sorted(planned) == ["mosaic", "tiles"]


def test_a_resumed_run_worker_plans_every_step_and_validates_none() -> None:
    """Its steps passed at the run's start, some are running: a pre-flight now would only
    delay taking them over (and could refuse a step that is already running)."""
    backend = RefusingBackend()
    planned, check = _check(backend, resumed=True)
    assert backend.validated == []
    assert not check.problems
    assert sorted(planned) == ["mosaic", "tiles"]
