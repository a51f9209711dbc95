"""dagster-k8s's k8s_job_executor runs a job to success against the emulator (the baseline)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dagster import DagsterInstance, execute_job, reconstructable
from emu_dagster_job import two_ops
from kubernetes import client

from k8s_ai_orchestrator.testing.kube import KubeEmulator

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(240)]

CODE_DIR = Path(__file__).parent  # where the step processes import emu_dagster_job from


@pytest.mark.slow
def test_dagster_k8s_job_executor_runs_a_two_op_job(
    emu: KubeEmulator, core: client.CoreV1Api, dagster_home: Path
) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="dagster")))
    kubeconfig = emu.tenant("team-a").kubeconfig_path
    # the executor reads its defaults from a K8sRunLauncher on the instance
    launcher = {
        "module": "dagster_k8s",
        "class": "K8sRunLauncher",
        "config": {
            "service_account_name": "default",
            "instance_config_map": "dagster-instance",
            "load_incluster_config": False,
            "kubeconfig_file": kubeconfig,
            "job_namespace": "dagster",
        },
    }
    settings = {"telemetry": {"enabled": False}, "run_launcher": launcher}
    (dagster_home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    run_config = {
        "execution": {
            "config": {
                "job_image": "emulator.local/pipeline:dev",
                "image_pull_policy": "IfNotPresent",
                "load_incluster_config": False,
                "kubeconfig_file": kubeconfig,
                "job_namespace": "dagster",
                "env_vars": [f"DAGSTER_HOME={dagster_home}", f"PYTHONPATH={CODE_DIR}"],
            }
        }
    }
    with (
        DagsterInstance.get() as instance,
        execute_job(reconstructable(two_ops), instance=instance, run_config=run_config) as result,
    ):
        assert result.success, _step_logs(core)
        assert result.output_for_node("add_one") == 21
    jobs = emu.jobs("team-a", "dagster")
    assert len(jobs) == 2
    # the run ends on the steps' events; the Job controller counts the pods a moment later
    emu.wait_for(
        lambda: all(j["status"].get("succeeded") == 1 for j in emu.jobs("team-a", "dagster"))
    )
    assert emu.request_counts("team-a")[("create", "jobs")] >= 2


def _step_logs(core: client.CoreV1Api) -> str:
    """The step pods' logs, to explain a failed run."""
    logs = []
    for pod in core.list_namespaced_pod("dagster").items:
        text = core.read_namespaced_pod_log(pod.metadata.name, "dagster", _preload_content=False)
        logs.append(f"--- {pod.metadata.name}\n{text.data.decode()}")
    return "\n".join(logs)
