"""Jobs that exercise Dagster's own controls through `ai_executor`: `max_concurrent`,
`tag_concurrency_limits`, concurrency pools and op retry policies. Each op records when it ran
into the folder named by env TEST_OUT (see `tests.local.jobs`)."""

import os
from pathlib import Path

from dagster import Definitions, Failure, RetryPolicy, job, op

from k8s_ai_orchestrator import ai_executor, compute

from .jobs import _record, _span

OUT = Path(os.environ.get("TEST_OUT", "/tmp"))
SMALL = compute(cpu=1, memory="256Mi")


def _spanning(name: str, tags: dict[str, str] | None = None, pool: str | None = None):  # type: ignore[no-untyped-def]
    @op(name=name, tags={**SMALL, **(tags or {})}, pool=pool)
    def _op() -> None:
        _span(name, 1.0)

    return _op


fan = [_spanning(f"fan_{i}") for i in range(4)]
db = [_spanning(f"db_{i}", tags={"database": "warehouse"}) for i in range(2)]
free = [_spanning(f"free_{i}") for i in range(2)]
pooled = [_spanning(f"pooled_{i}", pool="k8s-ai-test-pool") for i in range(2)]


@job(executor_def=ai_executor)
def fan_out() -> None:
    for step in fan:
        step()


@job(executor_def=ai_executor)
def tagged() -> None:
    for step in [*db, *free]:
        step()


@job(executor_def=ai_executor)
def pools() -> None:
    for step in pooled:
        step()


@op(tags=SMALL, retry_policy=RetryPolicy(max_retries=2))
def flaky() -> None:
    marker = OUT / "flaky-attempts"
    tries = int(marker.read_text()) + 1 if marker.exists() else 1
    marker.write_text(str(tries))
    _record("flaky", attempt=tries)
    if tries < 3:
        raise Failure(f"failing attempt {tries} on purpose")


@job(executor_def=ai_executor)
def retried() -> None:
    flaky()


defs = Definitions(jobs=[fan_out, tagged, pools, retried])
