"""What a resumed run worker reads back from a run's events (`executor.step_events`)."""

from dagster import DagsterInstance, OpExecutionContext, RetryRequested, job, op

from k8s_ai_orchestrator.executor.step_events import RecordedSteps, undecided_steps


@op
def flaky(context: OpExecutionContext) -> None:
    if context.retry_number == 0:
        raise RetryRequested(max_retries=1)


@op
def steady() -> None:
    pass


@job
def two_steps() -> None:
    flaky()
    steady()


def test_recorded_steps_count_each_step_s_successes_failures_and_retries() -> None:
    with DagsterInstance.ephemeral() as instance:
        result = two_steps.execute_in_process(instance=instance)
        records = instance.all_logs(result.run_id)
    events = [r.dagster_event for r in records if r.dagster_event is not None]
    assert result.success
    assert RecordedSteps.of(events).terminal == {"flaky": 2, "steady": 1}  # retry + success
    assert undecided_steps(events) == {}  # both ended in a success
