"""`Gang` on the local backend: nodes × tasks_per_node local processes, one per rank."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from dagster import DagsterInstance, execute_job, materialize
from dagster._core.definitions.reconstruct import ReconstructableRepository

from example_project.training import vegetation_model
from k8s_ai_orchestrator.errors import GangError
from k8s_ai_orchestrator.gang import Gang

GANG_JOBS = ReconstructableRepository.for_module(
    "tests.slurm.gang_jobs", "defs", working_directory=str(Path(__file__).parents[1])
)

pytestmark = pytest.mark.timeout(120)

RANK_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT")


def record_rank_env(out_dir: str) -> str:
    env = {name: os.environ[name] for name in RANK_VARS}
    Path(out_dir, f"rank-{env['RANK']}.json").write_text(json.dumps(env))
    return f"result of rank {env['RANK']}"


def fail_on_rank_one() -> str:
    if os.environ["RANK"] == "1":
        raise ValueError("shard 1 is corrupt")
    return "ok"


def wait_forever_unless_rank_one() -> None:
    if os.environ["RANK"] == "1":
        raise RuntimeError("rank 1 gave up")
    time.sleep(600)


def sleep_long() -> None:
    time.sleep(600)


def die_on_rank_one() -> str:
    if os.environ["RANK"] == "1":
        os._exit(137)
    return "ok"


@pytest.fixture
def two_nodes_two_tasks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K8S_AI_BACKEND", "local")
    monkeypatch.setenv("K8S_AI_NODES", "2")
    monkeypatch.setenv("K8S_AI_TASKS_PER_NODE", "2")


@pytest.fixture
def two_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K8S_AI_BACKEND", "local")
    monkeypatch.setenv("K8S_AI_NODES", "2")
    monkeypatch.setenv("K8S_AI_TASKS_PER_NODE", "1")


@pytest.mark.slow
def test_each_rank_sees_its_rank_and_node_rank_and_rank_zero_result_is_returned(
    two_nodes_two_tasks: None, tmp_path: Path
) -> None:
    result = Gang().run(record_rank_env, str(tmp_path))

    assert result == "result of rank 0"
    ranks = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(4)]
    assert [r["RANK"] for r in ranks] == ["0", "1", "2", "3"]
    assert {r["WORLD_SIZE"] for r in ranks} == {"4"}
    assert [r["LOCAL_RANK"] for r in ranks] == ["0", "1", "0", "1"]
    assert [r["NODE_RANK"] for r in ranks] == ["0", "0", "1", "1"]
    assert len({(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in ranks}) == 1


@pytest.mark.slow
def test_a_failing_rank_fails_the_gang_with_its_traceback(two_ranks: None) -> None:
    with pytest.raises(GangError) as failure:
        Gang().run(fail_on_rank_one)

    message = str(failure.value)
    assert "gang rank 1 of 2 failed" in message
    assert "ValueError: shard 1 is corrupt" in message
    assert "in fail_on_rank_one" in message


def test_a_failing_rank_stops_its_waiting_peers_instead_of_hanging(two_ranks: None) -> None:
    with pytest.raises(GangError, match="RuntimeError: rank 1 gave up"):
        Gang().run(wait_forever_unless_rank_one)


def test_a_gang_past_its_timeout_is_stopped(two_ranks: None) -> None:
    with pytest.raises(GangError, match="did not finish.*still running after 1s"):
        Gang(timeout_s=1).run(sleep_long)


def test_a_rank_killed_without_a_result_fails_the_gang(two_ranks: None) -> None:
    with pytest.raises(GangError, match=r"ended without a result \(rank 1 exited with code 137"):
        Gang().run(die_on_rank_one)


def test_a_lambda_is_refused_before_any_rank_starts(two_ranks: None) -> None:
    with pytest.raises(GangError, match="define the function at module level"):
        Gang().run(lambda: 1)


def test_outside_a_gang_step_there_is_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("K8S_AI_BACKEND", "K8S_AI_NODES", "K8S_AI_TASKS_PER_NODE"):
        monkeypatch.delenv(name, raising=False)

    assert Gang().run(os.getenv, "WORLD_SIZE") == "1"


def test_slurm_backend_outside_an_allocation_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("K8S_AI_BACKEND", "slurm")
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)

    with pytest.raises(GangError, match="inside the step's Slurm allocation"):
        Gang().run(os.getenv, "RANK")


def test_a_two_node_gang_asset_runs_as_local_ranks_under_ai_executor_without_slurm(
    instance: DagsterInstance, test_out: Path
) -> None:
    result = execute_job(
        GANG_JOBS.get_reconstructable_job("train_gang"),
        instance=instance,
        run_config={"execution": {"config": {"backend": "local"}}},
        raise_on_error=False,
    )

    assert result.success, [e.message for e in result.all_events if e.is_failure]
    ranks = [json.loads((test_out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    assert [(r["RANK"], r["NODE_RANK"], r["WORLD_SIZE"]) for r in ranks] == [
        ("0", "0", "2"),
        ("1", "1", "2"),
    ]


def test_the_example_training_asset_fits_the_model_on_two_ranks(
    two_ranks: None, instance: DagsterInstance
) -> None:
    result = materialize([vegetation_model], resources={"gang": Gang()}, instance=instance)

    model = result.output_for_node("vegetation_model")
    assert (model["world_size"], model["backend"]) == (2, "sockets")
    assert model["weight"] == pytest.approx(-0.8, abs=0.1)
    assert model["loss"] < 0.01
