"""`ai_executor` with `backend: kubernetes` on the emulated cluster, end to end.

The step processes are real `dagster api execute_step` processes started by the emulated
kubelet; the run is a real run in a temporary Dagster instance.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterEventType, DagsterInstance, execute_job
from dagster._core.definitions.reconstruct import ReconstructableRepository
from k8s_support import NAMESPACE, TENANTS

from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend
from tests.plane_fixtures import KUBE_TARGETS, TENANT_TARGETS
from tests.support import engine_messages

# emulator or controlplane: each target parameter carries its marker (tests/plane_fixtures.py)
pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).parents[2]
HERE = Path(__file__).parent


def executor_config(emu: Any, aliases: dict[str, str] | None = None) -> dict[str, Any]:
    """Config for both emulated tenants; `aliases` adds logical tenant names for them."""
    tenants = {t: t for t in TENANTS} | (aliases or {})
    return {
        "backend": "kubernetes",
        "default_tenant": "team-a",
        "allowed_tenants": list(tenants),
        "kubernetes": {
            "image": "ghcr.io/acme/pipeline:test",
            "python": sys.executable,
            "command_prefix": [sys.executable, "-m", "dagster"],
            "tenants": {
                name: {"kubeconfig": emu.tenant(t).kubeconfig_path, "namespace": NAMESPACE}
                for name, t in tenants.items()
            },
        },
    }


@pytest.mark.parametrize("cluster", TENANT_TARGETS, indirect=True)
@pytest.mark.slow
def test_example_pipeline_materializes_with_every_step_a_job_in_its_tenant(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VEGETATION_INBOX", str(tmp_path / "inbox"))
    monkeypatch.setenv("VEGETATION_CHECKPOINTS", (tmp_path / "ckpt").as_uri())
    monkeypatch.setenv("VEGETATION_UNIT_SECONDS", "0")
    monkeypatch.chdir(ROOT)
    repo = ReconstructableRepository.for_module(
        "example_project.definitions", "defs", working_directory=str(ROOT)
    )
    from dagster import AssetKey

    from example_project.definitions import defs

    steps = [
        key
        for key in defs.resolve_asset_graph().get_all_asset_keys()
        if key != AssetKey("vegetation_model")
    ]
    with DagsterInstance.get() as instance:
        result = execute_job(
            repo.get_reconstructable_job("vegetation_risk"),
            instance=instance,
            run_config={"execution": {"config": executor_config(cluster, {"vision": "team-b"})}},
            asset_selection=steps,
        )
        assert result.success
        messages = engine_messages(instance, result.run_id)
    assert any("'mosaic' on kubernetes tenant 'team-a' with xl" in m for m in messages)
    assert any("'vegetation_index' on kubernetes tenant 'vision' with gpu-1" in m for m in messages)

    def steps_in(tenant: str) -> set[str]:
        return {
            j["metadata"]["annotations"].get("k8s-ai/step-key", "")
            for j in cluster.jobs(tenant, NAMESPACE)
        }

    assert steps_in("team-b") == {"vegetation_index", "risk_scores"}
    assert len(cluster.jobs("team-a", NAMESPACE)) == len(steps) - 2


@pytest.fixture
def held_at_close(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """What each Kubernetes backend of the run still held when the run closed it: attempts,
    pods in its watches, log streams (the executor releases each step once it is done)."""
    held: list[tuple[int, int, int]] = []
    close = KubernetesBackend.close

    def spy(self: KubernetesBackend) -> None:
        pods = sum(len(w._pods) + len(w._gone) for w in self._watches._watches.values())
        held.append((len(self._attempts._attempts), pods, len(self._logs._followers)))
        close(self)

    monkeypatch.setattr(KubernetesBackend, "close", spy)
    return held


@pytest.mark.parametrize("cluster", TENANT_TARGETS, indirect=True)
@pytest.mark.slow
def test_oom_killed_step_is_relaunched_with_double_memory(
    cluster: Any, held_at_close: list[tuple[int, int, int]]
) -> None:
    repo = ReconstructableRepository.for_module(
        "k8s_pipelines", "defs", working_directory=str(HERE)
    )
    with DagsterInstance.get() as instance:
        result = execute_job(
            repo.get_reconstructable_job("oom_job"),
            instance=instance,
            run_config={"execution": {"config": executor_config(cluster)}},
        )
        assert result.success
        messages = engine_messages(instance, result.run_id)
    assert any("OOMKilled" in m for m in messages)
    forwarded = [m for m in messages if m.startswith("[kubernetes log] hungry:")]
    assert any("hungry: attempt 1 allocates 160 MB" in m for m in forwarded)  # the step's print
    assert not any(" - dagster - " in m for m in forwarded)  # its own events are not repeated
    limits = sorted(
        j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
        for j in cluster.jobs("team-a", NAMESPACE)
    )
    assert limits == ["256Mi", "512Mi"]
    assert held_at_close == [(0, 0, 0)]  # both attempts let go once the step succeeded


@pytest.mark.parametrize("cluster", KUBE_TARGETS, indirect=True)
def test_a_line_the_step_prints_after_its_success_still_reaches_the_run(
    cluster: Any, held_at_close: list[tuple[int, int, int]]
) -> None:
    """The step's process prints at exit, after STEP_SUCCESS is in the run's event log: the
    run worker reads its log on until the pod ended (`executor.log_tails`)."""
    repo = ReconstructableRepository.for_module(
        "k8s_pipelines", "defs", working_directory=str(HERE)
    )
    with DagsterInstance.get() as instance:
        result = execute_job(
            repo.get_reconstructable_job("late_print_job"),
            instance=instance,
            run_config={"execution": {"config": executor_config(cluster)}},
        )
        assert result.success
        records = instance.all_logs(result.run_id)
    kinds = [r.dagster_event.event_type_value for r in records if r.dagster_event]
    messages = [(r.dagster_event.message or "") if r.dagster_event else "" for r in records]
    late = [i for i, m in enumerate(messages) if "run synced at exit" in m]
    assert late and all(
        m.startswith("[kubernetes log] syncs_at_exit:") for m in map(messages.__getitem__, late)
    )
    assert kinds.index("STEP_SUCCESS") < late[0]  # it came after the step's success
    assert held_at_close == [(0, 0, 0)]  # let go once its tail was read


@pytest.mark.parametrize("cluster", KUBE_TARGETS, indirect=True)
def test_a_priced_run_records_what_each_step_used_and_the_memory_it_left_unused(
    cluster: Any,
) -> None:
    """With `prices` and neither growth nor `memory="auto"`, the step still reports its use
    (through its own log: the tenant needs no `nodes/proxy`), so its summary has the peak, the
    CPU time and the unused memory's waste in money."""
    repo = ReconstructableRepository.for_module(
        "k8s_pipelines", "defs", working_directory=str(HERE)
    )
    prices = {"cpu_hour": 0.04, "memory_gib_hour": 0.005}
    with DagsterInstance.get() as instance:
        result = execute_job(
            repo.get_reconstructable_job("late_print_job"),
            instance=instance,
            run_config={"execution": {"config": {**executor_config(cluster), "prices": prices}}},
        )
        assert result.success
        [meta] = [
            {k: v.value for k, v in r.dagster_event.engine_event_data.metadata.items()}  # type: ignore[union-attr]
            for r in instance.all_logs(result.run_id, of_type=DagsterEventType.ENGINE_EVENT)
            if (r.dagster_event.message or "").startswith("Step 'syncs_at_exit' reserved")  # type: ignore[union-attr]
        ]
    peak = int(meta["k8s_ai/peak_memory_bytes"])
    assert 20 * 1024**2 < peak < 256 * 1024**2, meta  # a Dagster step process, under its limit
    assert float(meta["k8s_ai/cpu_used_seconds"]) > 0.5, meta  # Dagster's start-up at least
    assert float(meta["k8s_ai/waste_unused_memory_gib_seconds"]) > 0, meta
    assert "k8s_ai/waste_unused_memory_cost" in meta, meta  # priced (rounds to 0 here)


@pytest.mark.parametrize("cluster", TENANT_TARGETS, indirect=True)
@pytest.mark.slow
def test_evicted_step_is_relaunched_and_resumes_from_its_checkpoint(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = ReconstructableRepository.for_module(
        "k8s_pipelines", "defs", working_directory=str(HERE)
    )
    marker = tmp_path / "evict-me"
    monkeypatch.setenv("EVICT_MARKER", str(marker))
    monkeypatch.setenv("CHECKPOINT_ROOT", (tmp_path / "ckpt").as_uri())
    stop = threading.Event()

    def evict_after_ten_units() -> None:
        while not stop.is_set() and not marker.exists():
            stop.wait(0.05)
        for pod in cluster.pods("team-a", NAMESPACE):
            labels = pod["metadata"].get("labels") or {}
            if labels.get("k8s-ai/attempt") == "0":
                cluster.evict_pod("team-a", NAMESPACE, pod["metadata"]["name"])

    evictor = threading.Thread(target=evict_after_ten_units, daemon=True)
    evictor.start()
    try:
        with (
            DagsterInstance.get() as instance,
            execute_job(
                repo.get_reconstructable_job("eviction_job"),
                instance=instance,
                run_config={"execution": {"config": executor_config(cluster)}},
            ) as result,
        ):
            assert result.success
            messages = engine_messages(instance, result.run_id)
            resumed_from = result.output_for_node("long_tile")
    finally:
        stop.set()
        evictor.join(timeout=5)
    assert any("'long_tile' was Evicted; relaunching at the same size" in m for m in messages)
    # Two attempts, each its own Job. The first one's Job may be gone: a failed attempt whose
    # pod the executor saw deleted and not ended is deleted with it.
    launches = [m for m in messages if m.startswith("Launching step 'long_tile'")]
    assert [m.endswith(f"(attempt {n})") for n, m in enumerate(launches, 1)] == [True, True]
    assert resumed_from >= 10  # the second attempt started where the first one saved
