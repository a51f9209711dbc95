"""A two-op Dagster job run by dagster-k8s's own k8s_job_executor against the emulator."""

from __future__ import annotations

from dagster import job, op
from dagster_k8s import k8s_job_executor


@op
def make_number() -> int:
    return 20


@op
def add_one(number: int) -> int:
    return number + 1


@job(executor_def=k8s_job_executor)
def two_ops() -> None:
    add_one(make_number())
