"""Backend-neutral launching, shared by the executor and the `AICompute` Pipes resource.

No Dagster here: plain settings and decisions that both Dagster-facing floors build on.

- `settings.py`: the `ai_executor` config → typed, validated `ExecutorSettings`;
- `plan.py`: where one step goes — its spec checked against the memory cap, its tenant
  against `allowed_tenants`, its backend;
- `backends.py`: builds each backend from the settings;
- `attempts.py`: per-step bookkeeping of the live attempt, its history and usage;
- `relaunch.py`: what to do after an attempt ended (relaunch, escalate memory, or fail);
- `autosize.py`: `compute(memory="auto")` sized from earlier runs' peaks (the executor's
  right-sizing reads the history and applies it).

Example:
    >>> from k8s_ai_orchestrator.launch.settings import ExecutorSettings
    >>> ExecutorSettings.from_config({}).backend
    'local'
"""
