"""The Dagster edge: `ai_executor` and everything that speaks Dagster's executor internals.

Only this package imports `dagster._core`. One step's way through it:

    op tags ──▶ spec ──▶ step handler ──▶ backend ──▶ status ──▶ relaunch decision ──▶ events
    (tags.py)  (spec.py) (step_handler)  (backends/) (watch/poll) (relaunch.py)      (step_events)
                    ▲                                                │
                    └──────────── new attempt: same size, or memory × factor ┘

- `definition.py`: the `ai_executor` definition, its config schema and the executor class;
- `settings.py`: executor config → typed, validated `ExecutorSettings` (no Dagster);
- `backends.py`: builds each backend from the settings;
- `step_handler.py`: Dagster's `StepHandler` — launch, check health, terminate;
- `attempts.py`: per-step bookkeeping of the live attempt and the step's history;
- `relaunch.py`: what to do after an attempt ended (relaunch, escalate memory, or fail);
- `step_events.py`: the engine events and metadata the UI shows.

The step environment (`stepenv.py`) is one floor down, in the core: backends pass it through
and step-side code (`CheckpointStore`, `Gang`) reads it.

Example:
    >>> from dagster import Definitions
    >>> defs = Definitions(assets=[], executor=ai_executor)
"""

from .definition import ai_executor

__all__ = ["ai_executor"]
