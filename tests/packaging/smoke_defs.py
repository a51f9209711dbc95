"""A two-step pipeline the wheel smoke test runs from the installed wheel (no repo on sys.path)."""

from dagster import Definitions, job, op

from k8s_ai_orchestrator import ai_executor, compute


@op(tags=compute(cpu=0.5, memory="256Mi"))
def produce() -> int:
    return 20


@op(tags=compute(cpu=0.5, memory="256Mi"))
def consume(value: int) -> int:
    return value + 22


@job(executor_def=ai_executor)
def two_steps() -> None:
    consume(produce())


defs = Definitions(jobs=[two_steps])
