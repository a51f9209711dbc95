"""`AICompute`: run one sized external program from inside an asset, through Dagster Pipes.

- `resource.py`: the resource (a `ConfigurableResource` that is a `PipesClient`);
- `attempts.py`: one attempt after another, with the executor's relaunch rules;
- `supervise.py`: watching one attempt — Pending reasons, node, timeout;
- `messages.py`: how Pipes messages come back (a file, or the pod's log).

It sits above the backends and `launch/` (settings, relaunch decisions) and below the
executor, which it never needs: an asset may use it under any executor.

Example:
    >>> AICompute().settings().backend
    'local'
"""

from .resource import CHECKPOINT_EXTRA, AICompute

__all__ = ["AICompute", "CHECKPOINT_EXTRA"]
