"""Two checkpointed assets in one in-process run; neither closes its handle.

The second asset signals itself with SIGTERM mid-way. Prints the step failure's error class
and whether SIGUSR2 handling was given back after the run. argv: root.
"""

import json
import os
import signal
import sys

from dagster import AssetExecutionContext, asset, materialize

from k8s_ai_orchestrator.checkpoint import CheckpointStore


@asset
def first(context: AssetExecutionContext, checkpoints: CheckpointStore) -> int:
    ckpt = checkpoints.open(context)
    ckpt.save({"done": True})
    return 1


@asset(deps=[first])
def second(context: AssetExecutionContext, checkpoints: CheckpointStore) -> int:
    ckpt = checkpoints.open(context)
    for unit in range(10):
        if unit == 3:
            os.kill(os.getpid(), signal.SIGTERM)
        if ckpt.due():
            ckpt.save({"unit": unit}, progress=unit)
            ckpt.exit_if_preempted()
    return 2


if __name__ == "__main__":
    store = CheckpointStore(root=sys.argv[1], interval_s=3600)
    result = materialize([first, second], resources={"checkpoints": store}, raise_on_error=False)
    (failure,) = result.get_step_failure_events()
    error = failure.step_failure_data.error
    print(
        json.dumps(
            {
                "failed_step": failure.step_key,
                "error_class": error.cls_name if error else None,
                "sigusr2_given_back": signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL,
            }
        )
    )
