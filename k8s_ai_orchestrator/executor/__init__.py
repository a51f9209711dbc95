"""The Dagster edge: `ai_executor` and everything that speaks Dagster's executor internals.

Only this package imports `dagster._core`. One step's way through it:

    op tags ──▶ spec ──▶ step handler ──▶ backend ──▶ status ──▶ relaunch decision ──▶ events
    (tags.py)  (spec.py) (step_handler)  (backends/) (watch/poll) (launch/relaunch) (step_events)
                    ▲                                                │
                    └──────────── new attempt: same size, or memory × factor ┘

- `definition.py`: the `ai_executor` definition (all a code location loads);
- `runner.py`: the executor class a run worker builds from it;
- `schema.py`: its config schema;
- `step_handler.py`: Dagster's `StepHandler` — launch, check health, terminate;
- `validation.py`: the run-start check of every step before the first submit;
- `step_events.py`: the engine events and metadata the UI shows.

One floor down, shared with the `AICompute` Pipes resource and free of Dagster, `launch/`
holds the settings, the step plan, the backend factory, the attempts bookkeeping and the
relaunch decisions.

The step environment (`stepenv.py`) is one floor down, in the core: backends pass it through
and step-side code (`CheckpointStore`, `Gang`) reads it.

Example:
    >>> from dagster import Definitions
    >>> defs = Definitions(assets=[], executor=ai_executor)
"""

from .definition import ai_executor

__all__ = ["ai_executor"]
