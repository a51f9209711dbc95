"""No secret the library is given ends up stored: not in Dagster's run storage or events,
compute logs, sbatch scripts, slurmrestd requests' bodies or Job manifests, nor in an error.

Secrets come from environment variables (`rest_token: {env: SLURM_JWT}`), kubeconfig files
and vCluster's `vc-<name>` secret; a failing pipeline is run on the local backend and on the
Kubernetes emulator and every stored byte is searched for the secret's value.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from dagster import Definitions, job, op

from k8s_ai_orchestrator import ai_executor, compute
from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

HERE = Path(__file__).parent
NAMESPACE = "default"


@op(tags=compute(cpu=0.5, memory="256Mi"))
def fails_on_purpose() -> None:
    raise RuntimeError("this step fails on purpose")


@job(executor_def=ai_executor)
def failing() -> None:
    fails_on_purpose()


defs = Definitions(jobs=[failing])


def files_holding(root: Path, secret: str) -> list[Path]:
    """Every file under `root` whose bytes contain `secret` (SQLite storage included)."""
    needle = secret.encode()
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def run_failing_job(executor_config: dict[str, Any]) -> Any:
    from dagster import DagsterInstance, execute_job
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    repo = ReconstructableRepository.for_module("test_secrets", "defs", working_directory=str(HERE))
    with DagsterInstance.get() as instance:
        result = execute_job(
            repo.get_reconstructable_job("failing"),
            instance=instance,
            run_config={"execution": {"config": executor_config}},
            raise_on_error=False,
        )
        records = [str(r) for r in instance.all_logs(result.run_id)]
        run_config = json.dumps(instance.get_run_by_id(result.run_id).run_config)  # type: ignore[union-attr]
    return result, records, run_config


# -- local backend ----------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_a_secret_in_the_environment_of_a_failing_local_run_is_stored_nowhere(
    dagster_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "tok-" + secrets.token_hex(16)
    monkeypatch.setenv("H2A_API_TOKEN", secret)
    log_dir = tmp_path / "step-logs"
    result, records, run_config = run_failing_job({"local": {"log_dir": str(log_dir)}})
    assert not result.success
    assert any("fails on purpose" in r for r in records)
    assert not [r for r in records if secret in r]
    assert secret not in run_config
    assert files_holding(dagster_home, secret) == []
    assert files_holding(log_dir, secret) == []


# -- Slurm: the REST token comes from an environment variable ---------------------------------


# what a real 22.05 slurmrestd answers at /openapi/v3 (the transport reads it first)
SLURMRESTD_OPENAPI = (
    Path(__file__).parents[1] / "slurm/golden/rest/openapi-22.05.json"
).read_bytes()


class RecordingSlurmRest:
    """A slurmrestd that accepts every job and keeps each request (headers and body) but the
    OpenAPI description's, whose headers it keeps apart."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.requests: list[tuple[Mapping[str, str], bytes]] = []
        self.description_headers: list[Mapping[str, str]] = []

    def __call__(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float
    ) -> tuple[int, bytes]:
        if self.status == 200 and url.endswith("/openapi/v3"):
            self.description_headers.append(dict(headers))
            return 200, SLURMRESTD_OPENAPI
        self.requests.append((dict(headers), body or b""))
        return self.status, json.dumps({"job_id": 7} if self.status == 200 else {}).encode()


def slurm_rest_config(env: str = "SLURM_JWT") -> Any:
    from k8s_ai_orchestrator.backends.slurm import config_from_mapping

    return config_from_mapping(
        {
            "transport": "rest",
            "rest_url": "http://slurm:6820",
            "rest_user": "ml",
            "rest_token": {"env": env},
            "workdir": "/shared/k8s_ai",
        }
    )


def gang_request() -> Any:
    from k8s_ai_orchestrator.backends.base import LaunchRequest
    from k8s_ai_orchestrator.spec import resolve_spec

    return LaunchRequest(
        run_id="run-1",
        step_key="train",
        attempt=0,
        command=[sys.executable, "-m", "dagster", "api", "execute_step"],
        env={"K8S_AI_STEP_KEY": "train"},
        spec=resolve_spec({"nodes": 2, "cpu": 2, "memory": "4Gi"}),
    )


def test_the_slurm_rest_token_is_read_from_its_env_var_and_sent_only_as_a_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from k8s_ai_orchestrator.backends.slurm.rest import RestTransport
    from k8s_ai_orchestrator.backends.slurm.script import batch_job, render_script

    secret = "jwt-" + secrets.token_hex(16)
    monkeypatch.setenv("SLURM_JWT", secret)
    monkeypatch.setenv("HF_TOKEN", "hf-" + secret)
    monkeypatch.setenv("H2A_VISIBLE", "forwarded")
    config = slurm_rest_config()
    http = RecordingSlurmRest()
    job = batch_job(gang_request(), config)
    script = render_script(job)
    assert RestTransport(config, http).submit(job, script, "train") == "7"

    ((headers, body),) = http.requests
    assert headers["X-SLURM-USER-TOKEN"] == secret
    assert [h["X-SLURM-USER-TOKEN"] for h in http.description_headers] == [secret]
    assert secret not in body.decode() and secret not in script
    environment = json.loads(body)["job"]["environment"]
    assert "SLURM_JWT" not in environment and "HF_TOKEN" not in environment
    assert environment["H2A_VISIBLE"] == "forwarded"
    assert secret not in repr(config)


def test_a_refused_slurm_rest_token_is_not_in_the_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from k8s_ai_orchestrator.backends.slurm.rest import RestTransport
    from k8s_ai_orchestrator.errors import BackendError

    secret = "jwt-" + secrets.token_hex(16)
    monkeypatch.setenv("H2A_JWT", secret)
    with pytest.raises(BackendError) as refused:
        RestTransport(slurm_rest_config("H2A_JWT"), RecordingSlurmRest(401)).job_info("7")
    assert "scontrol token username=ml" in str(refused.value)
    assert secret not in str(refused.value)


def test_both_slurm_transports_forward_the_same_environment_without_secrets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from k8s_ai_orchestrator.backends.slurm import SlurmConfig
    from k8s_ai_orchestrator.backends.slurm.cli import CliTransport
    from k8s_ai_orchestrator.backends.slurm.rest import RestTransport
    from k8s_ai_orchestrator.backends.slurm.script import batch_job

    sbatch = tmp_path / "bin" / "sbatch"  # an sbatch that records the environment it got
    sbatch.parent.mkdir()
    sbatch.write_text(
        f"#!{sys.executable}\nimport json, os\n"
        "json.dump(dict(os.environ), open(os.environ['H2A_ENV_OUT'], 'w'))\nprint('42')\n"
    )
    sbatch.chmod(0o755)
    monkeypatch.setenv("PATH", f"{sbatch.parent}:{os.environ['PATH']}")
    monkeypatch.setenv("H2A_ENV_OUT", str(tmp_path / "sbatch-env.json"))
    monkeypatch.setenv("SLURM_JWT", "jwt-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-value")
    monkeypatch.setenv("H2A_JWT", "rest-token")
    config = slurm_rest_config("H2A_JWT")
    job = batch_job(gang_request(), config)

    assert CliTransport(SlurmConfig()).submit(job, "#!/bin/bash\n", "train") == "42"
    cli_env = json.loads((tmp_path / "sbatch-env.json").read_text())
    http = RecordingSlurmRest()
    RestTransport(config, http).submit(job, "#!/bin/bash\n", "train")
    rest_env = json.loads(http.requests[0][1])["job"]["environment"]

    assert rest_env == cli_env
    assert rest_env["H2A_ENV_OUT"] == str(tmp_path / "sbatch-env.json")
    for secret in ("SLURM_JWT", "AWS_SECRET_ACCESS_KEY", "H2A_JWT"):
        assert secret not in rest_env


# -- Kubernetes: tenant credentials from a kubeconfig file or the vc-<name> secret -------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from tests.kubernetes.k8s_support import install_priority_classes

    nodes = [NodeSpec(name="node-a", cpu="8", memory="16Gi", gpus=0, labels={}, taints=())]
    with KubeEmulator(nodes=nodes, tenants=["team-a"], tls=False, workdir=None) as emu:
        install_priority_classes(emu.tenant("team-a").api_client())
        yield emu


def vcluster_tenant(emu: Any) -> dict[str, Any]:
    return {
        "vcluster": "team-a",
        "host_namespace": emu.host_namespace("team-a"),
        "host_kubeconfig": emu.host.kubeconfig_path,
        "server": emu.tenant("team-a").server_url,
        "namespace": NAMESPACE,
    }


@pytest.mark.emulator
@pytest.mark.timeout(300)
def test_vcluster_tenant_tokens_reach_no_event_run_config_or_job_manifest(
    cluster: Any, dagster_home: Path
) -> None:
    tokens = [cluster.tenant("team-a").token, cluster.host.token]
    result, records, run_config = run_failing_job(
        {
            "backend": "kubernetes",
            "default_tenant": "team-a",
            "kubernetes": {
                "image": "ghcr.io/acme/pipeline:test",
                "python": sys.executable,
                "command_prefix": [sys.executable, "-m", "dagster"],
                "tenants": {"team-a": vcluster_tenant(cluster)},
            },
        }
    )
    assert not result.success
    assert any("fails on purpose" in r for r in records)
    manifests = json.dumps(cluster.jobs("team-a", NAMESPACE))
    assert "fails_on_purpose" in manifests
    for token in tokens:
        assert not [r for r in records if token in r]
        assert token not in run_config and token not in manifests
        assert files_holding(dagster_home, token) == []


@pytest.mark.emulator
def test_a_rejected_tenant_token_names_tenant_server_and_fix_without_the_token(
    cluster: Any, tmp_path: Path
) -> None:
    from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from k8s_ai_orchestrator.errors import TenantAccessError
    from k8s_ai_orchestrator.testing.kube.emulator import kubeconfig_text
    from tests.kubernetes.k8s_support import python_step

    wrong = "expired-" + secrets.token_hex(12)
    server = cluster.tenant("team-a").server_url
    kubeconfig = tmp_path / "team-a.kubeconfig"
    kubeconfig.write_text(kubeconfig_text("team-a", server, wrong, None))
    config = KubernetesConfig.from_dict(
        {
            "image": "ghcr.io/acme/pipeline:test",
            "tenants": {"team-a": {"kubeconfig": str(kubeconfig), "namespace": NAMESPACE}},
        }
    )
    backend = KubernetesBackend(config, default_tenant="team-a", sleep=lambda s: None)
    try:
        with pytest.raises(TenantAccessError) as refused:
            backend.submit(python_step("pass"))
    finally:
        backend.close()
    message = str(refused.value)
    assert message.startswith(f"tenant 'team-a': {server} refused the executor's credentials")
    assert "vc-<name> secret" in message and "kubernetes.tenants.team-a.kubeconfig" in message
    assert wrong not in message and "Authorization" not in message and "HTTP" not in message
