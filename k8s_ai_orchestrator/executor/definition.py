"""`ai_executor`: Dagster's step-delegating executor with one step handler for every backend.

Each step's spec is resolved from its op tags before anything is submitted; the step is then
routed to the local, Kubernetes or Slurm backend. Infrastructure failures are handled here,
backend-neutrally: Preempted/Evicted/Lost attempts are relaunched at the same size and
OOMKilled ones with more memory, as new retry attempts that do not consume the op's
RetryPolicy. Only the modules of this package (`executor/`) import `dagster._core`.

Loading a code location imports this module and the config schema only; the executor class
and the run worker's modules (`runner.py`) load when a run worker builds the executor.

Example:
    >>> from dagster import Definitions
    >>> defs = Definitions(assets=[], executor=ai_executor.configured({"local": {"cpus": 4}}))
"""

from __future__ import annotations

from dagster import executor
from dagster._core.definitions.executor_definition import multiple_process_executor_requirements
from dagster._core.executor.base import Executor
from dagster._core.executor.init import InitExecutorContext

from .schema import CONFIG_SCHEMA


@executor(
    name="ai_executor",
    config_schema=CONFIG_SCHEMA,
    requirements=multiple_process_executor_requirements(),
)
def ai_executor(init_context: InitExecutorContext) -> Executor:
    """Runs each step where its `compute(...)` tags say, with relaunch and OOM escalation.

    Config keys: backend, size_classes, local {cpus, memory, gpus, oversize, log_dir,
    start_method}, kubernetes, slurm, gang_backend, default_tenant, allowed_tenants,
    oom_escalation {factor, max_memory, max_attempts, grow_at},
    auto_sizing {headroom, runs, trend}, prices {cpu_hour, memory_gib_hour, gpu_hour,
    gpu_hour_by_type, preemptible_factor, currency, backends, tenants}, budget {max_cost_per_step,
    max_cost_per_run, max_gpu_hours_per_step, max_gpu_hours_per_run, on_exceeded},
    max_preemption_retries, grace_period_s, poll_interval_s, idle_poll_interval_s,
    max_concurrent, tag_concurrency_limits, step_dependency_config, retries. See
    docs/executor-config.md.

    Example:
        >>> from dagster import Definitions
        >>> defs = Definitions(assets=[], executor=ai_executor)
    """
    from .runner import build_executor  # the run worker's modules: not with the code location

    return build_executor(dict(init_context.executor_config))


__all__ = ["CONFIG_SCHEMA", "ai_executor"]
