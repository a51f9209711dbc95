"""A run worker SIGKILLed mid-run is a non-event on Kubernetes: the run is resumed the way
Dagster's run monitoring resumes it (`dagster api resume_run`, what a resuming run launcher
starts), and the new run worker reattaches to the step's Job instead of launching it again.

The run worker is a real `dagster api execute_run` process; the steps are real `dagster api
execute_step` processes in the cluster's pods, which outlive it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterRunStatus
from hold_webhook import HoldingWebhook
from k8s_support import NAMESPACE, TENANTS, python_step, tenant_config
from kubernetes.client import CoreV1Api
from test_k8s_executor_e2e import executor_config

from k8s_ai_orchestrator.backends.base import StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.launch.backends import cancel_run
from k8s_ai_orchestrator.launch.settings import ExecutorSettings
from k8s_ai_orchestrator.testing.kube.emulator import wait_until
from tests.plane_fixtures import TENANT_TARGETS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def config(cluster: Any, op: str, folder: Path) -> dict[str, Any]:
    return {
        "execution": {"config": executor_config(cluster)},
        "ops": {op: {"config": {"dir": str(folder)}}},
    }


def running_pods(cluster: Any) -> list[str]:
    return [
        p["metadata"]["name"]
        for p in cluster.pods("team-a", NAMESPACE)
        if (p.get("status") or {}).get("phase") in ("Pending", "Running")
    ]


def seen(cluster: Any, worker: Any, folder: Path) -> Callable[[], str]:
    """What a timed-out wait says: the pods, the step's executions, the run worker's lines."""

    def describe() -> str:
        pods = [
            (p["metadata"]["name"], (p.get("status") or {}).get("phase"), p.get("status"))
            for p in cluster.pods("team-a", NAMESPACE)
        ]
        executions = folder / "executions"
        done = executions.read_text() if executions.exists() else "(none)"
        alive = worker.process.poll() is None
        return f"pods {pods}; executions {done!r}; run worker alive {alive}: {worker.messages()}"

    return describe


@pytest.mark.parametrize("cluster", TENANT_TARGETS, indirect=True)
def test_a_resumed_run_worker_reattaches_to_the_running_step_and_runs_it_once(
    cluster: Any, run_worker: Any, tmp_path: Path
) -> None:
    worker = run_worker("tally_job", config(cluster, "tally", tmp_path))
    forwarded = "[kubernetes log] tally:"
    logged = lambda: any(m.startswith(forwarded) for m in worker.messages())  # noqa: E731
    wait_until(logged, 120, 0.2, seen(cluster, worker, tmp_path))
    time.sleep(2)  # it runs 2 s more before the kill: its usage counts from its pod's start
    worker.kill()
    assert worker.status() == DagsterRunStatus.STARTED

    worker.resume()
    reattached = worker.reattached()
    worker.release(tmp_path)
    assert [m for m in worker.messages() if m.startswith("Reattached")] == [reattached]

    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    messages = worker.messages()
    assert reattached.startswith("Reattached to step 'tally' (attempt 1, kubernetes job k8s-ai-")
    assert reattached.endswith("after the run worker was lost")
    logs = "\n".join(m for m in messages if m.startswith(forwarded))
    assert logs.count("tally: before the release (attempt 0)") == 1  # not forwarded twice
    assert logs.count("tally: after the release") <= 1  # the last read may come before it
    assert len(cluster.jobs("team-a", NAMESPACE)) == 1
    cpu_seconds, attempts = worker.summary("tally")
    assert attempts == 1 and cpu_seconds >= 0.5 * 2  # 0.5 CPU × at least the 2 s unwatched
    wait_until(lambda: not running_pods(cluster), 60, 0.5)


def test_a_step_oom_killed_while_no_run_worker_watched_is_relaunched_with_more_memory(
    cluster: Any, run_worker: Any, tmp_path: Path
) -> None:
    worker = run_worker("hungry_later_job", config(cluster, "hungry_later", tmp_path))
    worker.started(tmp_path)
    worker.kill()
    (tmp_path / "release").touch()  # it now outgrows its 256Mi with no run worker watching

    def oom_killed() -> bool:
        pods = cluster.pods("team-a", NAMESPACE)
        return any((p.get("status") or {}).get("phase") == "Failed" for p in pods)

    wait_until(oom_killed, 120, 0.5)
    worker.resume()
    assert worker.process.wait(180) == 0
    assert worker.status() == DagsterRunStatus.SUCCESS

    executions = (tmp_path / "executions").read_text().splitlines()
    assert executions == ["hungry_later attempt 0", "hungry_later attempt 1"]
    messages = worker.messages()
    assert any(m.startswith("Reattached to step 'hungry_later' (attempt 1") for m in messages)
    assert any(m.startswith("Relaunching:") and "OOMKilled" in m for m in messages), messages
    limits = sorted(
        j["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
        for j in cluster.jobs("team-a", NAMESPACE)
    )
    assert limits == ["256Mi", "512Mi"]
    wait_until(lambda: not running_pods(cluster), 60, 0.5)


@pytest.mark.parametrize("cluster", TENANT_TARGETS, indirect=True)
def test_terminating_a_resumed_run_deletes_the_job_the_first_run_worker_launched(
    cluster: Any, run_worker: Any, tmp_path: Path
) -> None:
    worker = run_worker("tally_job", config(cluster, "tally", tmp_path))
    wait_until(lambda: running_pods(cluster), 120, 0.2)
    worker.kill()
    worker.resume()
    worker.reattached()
    worker.terminate()
    assert any(m.startswith("Cancelled step 'tally' (kubernetes job") for m in worker.messages())
    wait_until(lambda: not cluster.jobs("team-a", NAMESPACE), 60, 0.5)
    wait_until(lambda: not running_pods(cluster), 60, 0.5)
    assert not (tmp_path / "release").exists()


def test_every_job_of_a_run_whose_run_worker_is_gone_is_deleted_by_the_run_alone(
    cluster: Any, run_worker: Any, tmp_path: Path
) -> None:
    """What terminating such a run does (`ProcessRunLauncher.terminate`): `CancelsRuns`."""
    worker = run_worker("tally_job", config(cluster, "tally", tmp_path))
    wait_until(lambda: running_pods(cluster), 120, 0.2)
    worker.kill()
    (job,) = [j["metadata"]["name"] for j in cluster.jobs("team-a", NAMESPACE)]
    settings = ExecutorSettings.from_config(executor_config(cluster))
    assert cancel_run(settings, worker.run.run_id) == {"local": [], "kubernetes": [job]}
    wait_until(lambda: not cluster.jobs("team-a", NAMESPACE), 60, 0.5)
    wait_until(lambda: not running_pods(cluster), 60, 0.5)


def test_a_step_evicted_while_no_run_worker_watched_resumes_from_its_checkpoint(
    cluster: Any, run_worker: Any, tmp_path: Path
) -> None:
    """The eviction's failure event is decided by the resumed run worker as a live one would:
    relaunched at the same size, from the last checkpoint, without spending the RetryPolicy."""
    run_config = config(cluster, "resumable", tmp_path)
    run_config["resources"] = {"checkpoints": {"config": {"root": (tmp_path / "ck").as_uri()}}}
    worker = run_worker("resumable_job", run_config)
    worker.started(tmp_path)
    worker.kill()
    (pod,) = running_pods(cluster)
    cluster.evict_pod("team-a", NAMESPACE, pod)
    wait_until(lambda: not running_pods(cluster), 60, 0.2)  # it saved and stopped, unwatched

    worker.resumes_from_checkpoint(tmp_path)
    messages = worker.messages()
    # its pod is gone: the SIGTERM it stopped on reads as a preemption
    assert any("'resumable' was Preempted; relaunching at the same size" in m for m in messages)
    assert len(cluster.jobs("team-a", NAMESPACE)) == 2


def test_a_run_worker_lost_while_its_job_was_being_created_is_resumed_onto_that_job(
    emulator: Any, run_worker: Any, tmp_path: Path
) -> None:
    """Killed during the launch: the API server created the step's Job, but its answer had
    not reached the run worker when it died, so no launch event records it. The resumed run
    worker finds the Job by its name (run, step, attempt) and launches nothing twice. (The
    emulator answers the create 4 s late; on a real server the next test holds the create in
    admission instead, and the server drops it with its client.)"""
    emulator.slow_responses("team-a", seconds=4, count=1, verb="create", path_regex=r"/jobs$")
    worker = run_worker("tally_job", config(emulator, "tally", tmp_path))
    creating = ("create", "jobs")
    wait_until(lambda: emulator.request_counts("team-a")[creating] == 1, 120, 0.05)
    worker.kill()
    wait_until(lambda: emulator.jobs("team-a", NAMESPACE), 30, 0.2)
    assert not any(m.startswith("Launching step 'tally'") for m in worker.messages())

    worker.resume()
    reattached = worker.reattached()
    worker.release(tmp_path)
    assert reattached.startswith("Reattached to step 'tally' (attempt 1, kubernetes job k8s-ai-")
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    assert len(emulator.jobs("team-a", NAMESPACE)) == 1
    assert emulator.request_counts("team-a")[creating] == 1


@pytest.mark.controlplane
def test_a_run_worker_lost_while_a_real_api_server_admitted_its_job_runs_the_step_once(
    real_kube: Any, run_worker: Any, tmp_path: Path
) -> None:
    """Killed during the launch on a real API server: a validating webhook holds the Job's
    create for 4 s, and the run worker dies meanwhile. kube-apiserver v1.37 drops a create
    whose client went away during admission (measured: no Job); whatever it makes of it, the
    resumed run worker adopts the Job if it exists or launches it if not: one Job, one
    execution."""
    tenant = real_kube.tenant("team-a").api_client()
    hook = HoldingWebhook(real_kube.plane.ca, tmp_path / "webhook", NAMESPACE, hold_s=4)
    hook.start(tenant)
    try:
        worker = run_worker("tally_job", config(real_kube, "tally", tmp_path))
        assert hook.holding.wait(120), worker.messages()
        worker.kill()
        time.sleep(6)  # the hold ends: the server finishes the create, or has dropped it
        assert not any(m.startswith("Launching step 'tally'") for m in worker.messages())
        created = len(real_kube.jobs("team-a", NAMESPACE))

        worker.resume()
        wait_until(lambda: (tmp_path / "executions").exists(), 120, 0.2)
        worker.release(tmp_path)
    finally:
        hook.stop()
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    assert len(real_kube.jobs("team-a", NAMESPACE)) == 1
    reattached = [m for m in worker.messages() if m.startswith("Reattached to step 'tally'")]
    assert len(reattached) == created, (created, worker.messages())  # adopted iff it existed


@pytest.mark.parametrize("cluster", TENANT_TARGETS, indirect=True)
def test_a_step_pending_when_the_run_worker_died_is_watched_on_until_it_runs_once(
    cluster: Any, run_worker: Any, tmp_path: Path
) -> None:
    """Killed while the step's Job waits for quota (the Job controller cannot create its pod):
    the resumed run worker reattaches to the Job with no pod, and once the quota has room the
    pod is created and runs the step once."""
    core = CoreV1Api(cluster.tenant("team-a").api_client())
    quota = {"metadata": {"name": "tight"}, "spec": {"hard": {"requests.cpu": "0.75"}}}
    core.create_namespaced_resource_quota(NAMESPACE, quota)
    raw = tenant_config(cluster)
    holder = KubernetesBackend(KubernetesConfig.from_dict(raw), allowed_tenants=TENANTS)
    hold = "import time; time.sleep(600)"
    try:
        wait_until(
            lambda: core.read_namespaced_resource_quota("tight", NAMESPACE).status.hard, 30, 0.2
        )
        held = holder.submit(python_step(hold, step="holder", cpu=0.5, tenant="team-a"))
        wait_until(lambda: holder.status(held).state is StepState.RUNNING, 120, 0.2)
        worker = run_worker("tally_job", config(cluster, "tally", tmp_path))
        pending = "Step 'tally' is Pending"
        wait_until(lambda: any(m.startswith(pending) for m in worker.messages()), 120, 0.2)
        worker.kill()
        worker.resume()
        reattached = worker.reattached()
        holder.cancel(held)  # the quota has room again
        worker.release(tmp_path)
    finally:
        holder.close()
        core.delete_namespaced_resource_quota("tight", NAMESPACE)
    assert reattached.startswith("Reattached to step 'tally' (attempt 1, kubernetes job k8s-ai-")
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    tally = [
        j
        for j in cluster.jobs("team-a", NAMESPACE)
        if j["metadata"]["annotations"].get("k8s-ai/step-key") == "tally"
    ]
    assert len(tally) == 1
