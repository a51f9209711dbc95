"""A 2-node gang asset that `ai_executor` sends to Slurm (loaded by real step processes)."""

import json
import os
from pathlib import Path

from dagster import Definitions, asset, define_asset_job

from k8s_ai_orchestrator import ai_executor, compute
from k8s_ai_orchestrator.gang import Gang


def describe_rank(out_dir: str) -> dict[str, str]:
    seen = {name: os.environ[name] for name in ("RANK", "WORLD_SIZE", "NODE_RANK")}
    seen["node"] = os.environ.get("SLURMD_NODENAME", "local")
    Path(out_dir, f"rank-{seen['RANK']}.json").write_text(json.dumps(seen))
    return seen


@asset(op_tags=compute(nodes=2, tasks_per_node=1, cpu=1, memory="256Mi"))
def gang_model(gang: Gang) -> dict[str, str]:
    return gang.run(describe_rank, os.environ["TEST_OUT"])


defs = Definitions(
    assets=[gang_model],
    jobs=[define_asset_job("train_gang", selection=[gang_model])],
    resources={"gang": Gang(timeout_s=120)},
    executor=ai_executor,
)
