"""What the executor asks a backend for: each step planned from its op tags and the run's
tags, and the launch request of an attempt (the command Dagster gives, the labels a
Kubernetes backend reads as job config)."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from dagster._core.execution.context.system import PlanOrchestrationContext
from dagster._core.executor.step_delegating.step_handler.base import StepHandlerContext
from dagster._grpc.types import ExecuteStepArgs

from ..backends.base import LaunchRequest
from ..launch.attempts import StepAttempts
from ..launch.plan import PlannedStep, launch_request, plan_step
from ..launch.settings import ExecutorSettings
from ..spec import ComputeSpec
from ..tags import TAG_PREFIX, spec_from_tags

DAGSTER_K8S_TAGS = ("dagster-k8s/config", "dagster-k8s/resource_requirements")


class StepRequests:
    """Plans a run's steps and builds their launch requests."""

    def __init__(self, settings: ExecutorSettings) -> None:
        self._settings = settings
        self.plan_context: PlanOrchestrationContext | None = None

    def plan(self, step_key: str, tags: Mapping[str, str]) -> PlannedStep:
        """The step's spec, tenant (its own, the run's `k8s_ai/tenant` tag, the default) and
        backend; raises the library's error for what the settings never allow."""
        spec = spec_from_tags(tags, self._settings.size_classes, step=step_key)
        run_tags = self.plan_context.dagster_run.tags if self.plan_context else {}
        return plan_step(self._settings, step_key, spec, run_tags.get(TAG_PREFIX + "tenant"))

    def first(self, step: PlannedStep, tags: Mapping[str, str]) -> LaunchRequest:
        """The launch request of the step's first attempt, as validated at run start."""
        run_id = self.plan_context.run_id if self.plan_context else "validation"
        command = [sys.executable, "-m", "dagster", "api", "execute_step"]
        return launch_request(
            self._settings, step, step.spec, run_id=run_id, attempt=0, command=command,
            labels=self.labels(tags),
        )  # fmt: skip

    def attempt(
        self,
        live: StepAttempts,
        ctx: StepHandlerContext,
        spec: ComputeSpec,
        attempt: int,
        args: ExecuteStepArgs | None = None,
    ) -> tuple[PlannedStep, LaunchRequest]:
        """The step's route and the request of its attempt number `attempt` at `spec`, with
        the command of `args` (default: `ctx`'s)."""
        args = args or ctx.execute_step_args
        planned = PlannedStep(live.history.step_key, live.spec, live.backend, live.tenant)
        request = launch_request(
            self._settings, planned, spec, run_id=args.run_id, attempt=attempt,
            command=step_command(args), preemptions=live.history.preemptions,
            labels=self.labels(ctx.step_tags[planned.key]),
        )  # fmt: skip
        return planned, request

    def labels(self, step_tags: Mapping[str, str]) -> dict[str, str]:
        """Job name, plus the dagster-k8s tags a Kubernetes backend reads as job config."""
        labels = {k: v for k, v in step_tags.items() if k in DAGSTER_K8S_TAGS}
        if self.plan_context is not None:
            labels["dagster/job"] = self.plan_context.dagster_run.job_name
        return labels


def step_command(args: Any) -> list[str]:
    """`python -m dagster api execute_step ...` with the code location's own interpreter."""
    command = list(args.get_command_args())
    if command and command[0] == "dagster":
        return [args.job_origin.executable_path, "-m", "dagster", *command[1:]]
    return command


def single_key(ctx: StepHandlerContext) -> str:
    keys = ctx.execute_step_args.step_keys_to_execute or []
    assert len(keys) == 1, f"ai_executor launches one step at a time, got {keys}"
    return keys[0]


__all__ = ["StepRequests", "single_key", "step_command"]
