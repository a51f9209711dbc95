"""Run one job of `tests.local.jobs` on the instance in DAGSTER_HOME, as a run worker would.

`python -m tests.local.run_job JOB EXECUTOR_CONFIG_JSON` prints `{"run_id", "success"}`.
Tests start several at once to have concurrent runs on one instance.
"""

import json
import sys
from pathlib import Path

from dagster import DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository


def main(job: str, executor_json: str) -> None:
    repo = ReconstructableRepository.for_module(
        "tests.local.jobs", "defs", working_directory=str(Path(__file__).parents[2])
    )
    config = {"execution": {"config": json.loads(executor_json)}}
    with DagsterInstance.get() as instance:
        result = execute_job(
            repo.get_reconstructable_job(job),
            instance=instance,
            run_config=config,
            raise_on_error=False,
        )
    print(json.dumps({"run_id": result.run_id, "success": result.success}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
