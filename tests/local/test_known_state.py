"""Each launched step's arguments carry only the outputs its inputs come from, and its process
still loads every input: mapped, collected and plain (`loop.known_state_for`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.execution.plan.handle import StepHandle
from dagster._core.execution.plan.outputs import StepOutputHandle
from dagster._core.execution.plan.state import KnownExecutionState

from k8s_ai_orchestrator.executor.loop import known_state_for

JOBS = ReconstructableRepository.for_module(
    "tests.local.jobs", "defs", working_directory=str(Path(__file__).parents[2])
)


class Step:
    """An `ExecutionStep` as `known_state_for` sees it: its key and its upstream step keys."""

    def __init__(self, key: str, upstream: set[str]) -> None:
        self.handle = StepHandle.parse_from_key(key)
        self.upstream = upstream

    def get_execution_dependency_keys(self) -> set[str]:
        return self.upstream


def test_a_step_gets_the_ready_outputs_of_its_upstream_steps_only() -> None:
    ready = {StepOutputHandle(f"step_{i}", "result") for i in range(1000)}
    known = KnownExecutionState(
        previous_retry_attempts={"gather": 1},
        dynamic_mappings={"emit": {"result": ["a", "b"]}},
        ready_outputs=ready | {StepOutputHandle("emit", "result", "a")},
    )
    leaf = known_state_for(known, Step("step_1000", set()))  # type: ignore[arg-type]
    assert leaf.ready_outputs == set()
    assert leaf.dynamic_mappings == known.dynamic_mappings
    assert leaf.previous_retry_attempts == known.previous_retry_attempts
    mapped = known_state_for(known, Step("square[a]", {"emit"}))  # type: ignore[arg-type]
    assert mapped.ready_outputs == {StepOutputHandle("emit", "result", "a")}
    gather = known_state_for(known, Step("gather", {"step_1", "step_2"}))  # type: ignore[arg-type]
    assert gather.ready_outputs == {StepOutputHandle(f"step_{i}", "result") for i in (1, 2)}


@pytest.mark.slow
def test_mapped_collected_and_plain_inputs_load_in_the_step_processes(
    instance: DagsterInstance,
) -> None:
    with execute_job(
        JOBS.get_reconstructable_job("dynamic_fan_out"),
        instance=instance,
        run_config={"execution": {"config": {"backend": "local"}}},
        raise_on_error=False,
    ) as result:
        assert result.success, [e.message for e in result.all_events if e.is_failure]
        assert result.output_for_node("total") == 0 + 1 + 4 + 100
