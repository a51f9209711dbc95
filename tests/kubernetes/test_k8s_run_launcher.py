"""Dagster's own `K8sRunLauncher` under a real `dagster-daemon` with run monitoring: the run
worker is a pod (a Job `dagster-run-<id>` in the tenant), the node runs it, and when its
process is SIGKILLed the Job fails; the daemon sees that, resumes the run with a second run
worker Job, and `ai_executor` in it reattaches to the step Job the first one launched, which
runs once. This is the production set-up on Kubernetes, with nothing of ours between Dagster's
launcher and the cluster."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml
from dagster import DagsterInstance, DagsterRun, DagsterRunStatus
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.launcher.base import WorkerStatus
from k8s_support import NAMESPACE
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from test_k8s_executor_e2e import executor_config

from tests.e2e.e2e_support import Services, wait_until
from tests.support import engine_messages

pytestmark = [pytest.mark.daemon, pytest.mark.slow, pytest.mark.timeout(300)]

BIN = Path(sys.executable).parent
TESTS = Path(__file__).parents[1]
REPO = ReconstructableRepository.for_module(
    "resume_pipelines", "defs", working_directory=str(TESTS)
)


DAGSTERS = ("dagster_k8s", "K8sRunLauncher")  # Dagster's own launcher
OURS = ("k8s_ai_orchestrator", "AIK8sRunLauncher")  # the same, whose terminate reaches steps


def instance_yaml(cluster: Any, home: Path, launcher: tuple[str, str] = DAGSTERS) -> str:
    """dagster.yaml as a Helm-deployed Dagster has it: `K8sRunLauncher` (run workers as Jobs
    in the tenant's namespace) and run monitoring that resumes a run whose run worker died."""
    config = {
        "service_account_name": "default",
        "instance_config_map": "dagster-instance",
        "job_namespace": NAMESPACE,
        "load_incluster_config": False,
        "kubeconfig_file": cluster.tenant("team-a").kubeconfig_path,
        "job_image": "k8s-ai-test:latest",
        "image_pull_policy": "Never",
        "dagster_home": str(home),
    }
    return yaml.safe_dump(
        {
            "telemetry": {"enabled": False},
            "run_coordinator": {
                "module": "dagster._core.run_coordinator",
                "class": "DefaultRunCoordinator",
            },
            "run_launcher": {"module": launcher[0], "class": launcher[1], "config": config},
            "run_monitoring": {
                "enabled": True,
                "max_resume_run_attempts": 2,
                "poll_interval_seconds": 1,
            },
        }
    )


def launch(instance: DagsterInstance, cluster: Any, folder: Path) -> DagsterRun:
    """A run of `tally_job` launched through the instance's run launcher."""
    recon = REPO.get_reconstructable_job("tally_job")
    run = instance.create_run_for_job(
        job_def=recon.get_definition(),
        run_config={
            "execution": {"config": executor_config(cluster)},
            "ops": {"tally": {"config": {"dir": str(folder)}}},
        },
        job_code_origin=recon.get_python_origin(),
    )
    instance.launch_run(run.run_id, workspace=None)  # type: ignore[arg-type]
    return run


def use_k8s_run_launcher(cluster: Any, home: Path, launcher: tuple[str, str] = DAGSTERS) -> None:
    """Write the instance's dagster.yaml and the ConfigMap its Helm chart would create."""
    (home / "dagster.yaml").write_text(instance_yaml(cluster, home, launcher))
    core = CoreV1Api(cluster.tenant("team-a").api_client())
    config_map = {"metadata": {"name": "dagster-instance"}, "data": {"dagster.yaml": "{}"}}
    try:
        core.create_namespaced_config_map(NAMESPACE, config_map)
    except ApiException as error:  # the session's real plane keeps an earlier test's
        if error.status != 409:
            raise


def step_jobs(cluster: Any) -> list[str]:
    names = [j["metadata"]["name"] for j in cluster.jobs("team-a", NAMESPACE)]
    return [name for name in names if name.startswith("k8s-ai-")]


def wait_for_step(folder: Path, services: list[Any] | None = None) -> None:
    """Until the run's step has begun (it counts its execution in `folder`)."""
    wait_until(
        lambda: True if (folder / "executions").exists() else None,
        timeout_s=180,
        what="the step",
        services=services or (),
    )


def run_worker_processes(run: DagsterRun) -> list[psutil.Process]:
    """The run's run-worker processes the node runs (`dagster api execute_run|resume_run`)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        line = " ".join(proc.info["cmdline"] or ())
        if run.run_id in line and ("execute_run" in line or "resume_run" in line):
            found.append(proc)
    return found


def test_the_daemon_resumes_a_k8s_run_launcher_run_whose_run_worker_pod_died(
    cluster: Any, dagster_home: Path, tmp_path: Path
) -> None:
    use_k8s_run_launcher(cluster, dagster_home)
    services = Services()
    with DagsterInstance.get() as instance:
        try:
            env = {**os.environ, "DAGSTER_HOME": str(dagster_home), "PYTHONUNBUFFERED": "1"}
            argv = [str(BIN / "dagster-daemon"), "run", "-m", "resume_pipelines", "-d", str(TESTS)]
            daemon = services.start("daemon-k8s-run-launcher", argv, env, tmp_path / "daemon.log")
            run = launch(instance, cluster, tmp_path)
            wait_for_step(tmp_path, [daemon])
            (first,) = run_worker_processes(run)
            first.send_signal(signal.SIGKILL)  # its pod fails, and with it the run worker Job

            def reattached() -> bool | None:
                messages = engine_messages(instance, run.run_id)
                return True if any(m.startswith("Reattached") for m in messages) else None

            wait_until(reattached, timeout_s=180, what="the resumed run worker", services=[daemon])
            (tmp_path / "release").touch()

            def finished() -> DagsterRunStatus | None:
                found = instance.get_run_by_id(run.run_id)
                assert found is not None
                return found.status if found.is_finished else None

            done = wait_until(finished, timeout_s=180, what="the run", services=[daemon])
            assert done == DagsterRunStatus.SUCCESS, engine_messages(instance, run.run_id)
        finally:
            services.stop_all()
            for proc in run_worker_processes(run):
                proc.kill()
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
    messages = engine_messages(instance, run.run_id)
    assert any("Resuming run" in m for m in messages), messages
    reattached = [m for m in messages if m.startswith("Reattached")]
    assert reattached and reattached[0].startswith("Reattached to step 'tally' (attempt 1, ")
    run_workers = sorted(
        j["metadata"]["name"]
        for j in cluster.jobs("team-a", NAMESPACE)
        if j["metadata"]["name"].startswith("dagster-run-")
    )
    assert run_workers == [f"dagster-run-{run.run_id}", f"dagster-run-{run.run_id}-1"]
    assert len(step_jobs(cluster)) == 1


def test_terminating_a_k8s_run_launcher_run_deletes_its_step_jobs(
    cluster: Any, dagster_home: Path, tmp_path: Path
) -> None:
    """Dagster's launcher deletes the run worker's Job; the run worker, stopped by its pod's
    deletion, cancels the step Jobs it launched."""
    use_k8s_run_launcher(cluster, dagster_home)
    with DagsterInstance.get() as instance:
        run = launch(instance, cluster, tmp_path)
        try:
            wait_for_step(tmp_path)
            assert step_jobs(cluster)
            assert instance.run_launcher.terminate(run.run_id)
            wait_until(
                lambda: True if not step_jobs(cluster) else None, timeout_s=120, what="no step Job"
            )
            wait_until(
                lambda: True if not run_worker_processes(run) else None,
                timeout_s=60,
                what="the run worker to exit",
            )
        finally:
            for proc in run_worker_processes(run):
                proc.kill()
        found = instance.get_run_by_id(run.run_id)
        assert found is not None and found.status == DagsterRunStatus.CANCELED, found
    assert not (tmp_path / "release").exists()


def test_terminating_a_run_whose_run_worker_pod_died_cancels_its_step_jobs(
    cluster: Any, dagster_home: Path, tmp_path: Path
) -> None:
    """With no daemon to resume it, the run worker's pod is killed: Dagster's own terminate
    would only delete the dead run worker's Job. `AIK8sRunLauncher` sees the run worker has
    failed, deletes the step's Job (its pod's process stops before it is released) and marks
    the run canceled."""
    use_k8s_run_launcher(cluster, dagster_home, OURS)
    with DagsterInstance.get() as instance:
        run = launch(instance, cluster, tmp_path)
        try:
            wait_for_step(tmp_path)
            (first,) = run_worker_processes(run)
            first.send_signal(signal.SIGKILL)
            launcher = instance.run_launcher
            assert type(launcher).__name__ == "AIK8sRunLauncher"

            def failed() -> bool | None:
                found = instance.get_run_by_id(run.run_id)
                assert found is not None
                health = launcher.check_run_worker_health(found)
                return True if health.status == WorkerStatus.FAILED else None

            wait_until(failed, timeout_s=120, what="the run worker's Job to fail")
            assert step_jobs(cluster)  # nobody cancelled it yet
            assert launcher.terminate(run.run_id)
            wait_until(
                lambda: True if not step_jobs(cluster) else None, timeout_s=60, what="no step Job"
            )
        finally:
            for proc in run_worker_processes(run):
                proc.kill()
        found = instance.get_run_by_id(run.run_id)
        assert found is not None and found.status == DagsterRunStatus.CANCELED, found
        messages = engine_messages(instance, run.run_id)
    gone = [m for m in messages if "is gone; cancelled its steps' attempts" in m]
    assert len(gone) == 1 and "kubernetes: k8s-ai-" in gone[0], messages
    assert not (tmp_path / "release").exists()
    assert (tmp_path / "executions").read_text().splitlines() == ["tally attempt 0"]
