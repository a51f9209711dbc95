"""API servers, kubeconfigs and tenancy: each vCluster tenant is its own API server."""

from __future__ import annotations

import base64
import subprocess

import pytest
import yaml
from emu_support import python_pod
from kubernetes import client, config

from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec
from tests.requirements import INSTALL_DEPS, require_program

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]


def test_each_server_has_its_own_kubeconfig_with_a_bearer_token(emu: KubeEmulator) -> None:
    urls = {emu.host.server_url, emu.tenant("team-a").server_url, emu.tenant("team-b").server_url}
    assert len(urls) == 3
    for server in (emu.host, emu.tenant("team-a")):
        kubeconfig = yaml.safe_load(open(server.kubeconfig_path))
        assert kubeconfig["clusters"][0]["cluster"]["server"] == server.server_url
        assert kubeconfig["users"][0]["user"]["token"] == server.token


def test_tenant_kubeconfig_is_published_as_the_vcluster_secret_on_the_host(
    emu: KubeEmulator,
) -> None:
    host = client.CoreV1Api(emu.host.api_client())
    secret = host.read_namespaced_secret("vc-team-a", emu.host_namespace("team-a"))
    published = base64.b64decode(secret.data["config"]).decode()
    assert published == open(emu.tenant("team-a").kubeconfig_path).read()
    assert emu.host_namespace("team-a") == "vcluster-team-a"


def test_a_tenant_token_cannot_read_another_tenant(emu: KubeEmulator, tmp_path) -> None:
    stolen = yaml.safe_load(open(emu.tenant("team-b").kubeconfig_path))
    stolen["users"][0]["user"]["token"] = emu.tenant("team-a").token
    path = tmp_path / "stolen.yaml"
    path.write_text(yaml.safe_dump(stolen))
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(path)))
    with pytest.raises(client.ApiException) as raised:
        core.list_namespaced_pod("default")
    assert raised.value.status == 401


def test_tenants_do_not_see_each_others_objects(emu: KubeEmulator) -> None:
    team_a = client.CoreV1Api(emu.tenant("team-a").api_client())
    team_b = client.CoreV1Api(emu.tenant("team-b").api_client())
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="only-a"), data={"k": "v"})
    team_a.create_namespaced_config_map("default", body)
    names_b = [cm.metadata.name for cm in team_b.list_namespaced_config_map("default").items]
    assert "only-a" not in names_b


def test_discovery_answers_version_and_resource_lists(emu: KubeEmulator) -> None:
    api = emu.host.api_client()
    assert client.VersionApi(api).get_code().major == "1"
    core_resources = client.CoreV1Api(api).get_api_resources()
    names = {resource.name for resource in core_resources.resources}
    assert {"pods", "pods/log", "pods/eviction", "events", "secrets"} <= names
    batch_resources = client.BatchV1Api(api).get_api_resources()
    assert "jobs" in {resource.name for resource in batch_resources.resources}
    groups = {group.name for group in client.ApisApi(api).get_api_versions().groups}
    assert {"batch", "scheduling.k8s.io", "authorization.k8s.io"} <= groups


def test_tls_servers_are_verified_with_the_generated_ca() -> None:
    with KubeEmulator(nodes=[NodeSpec("n1")], tenants=["secure"], tls=True) as emu:
        assert emu.tenant("secure").server_url.startswith("https://")
        core = client.CoreV1Api(emu.tenant("secure").api_client())
        assert core.read_namespace("default").metadata.name == "default"
        kubeconfig = yaml.safe_load(open(emu.host.kubeconfig_path))
        assert kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]


def test_stop_kills_every_container_process() -> None:
    emu = KubeEmulator(nodes=[NodeSpec("n1", cpu="2", memory="2Gi")]).start()
    core = client.CoreV1Api(emu.host.api_client())
    core.create_namespaced_pod("default", python_pod("sleeper", "import time; time.sleep(600)"))
    emu.wait_for(lambda: emu.processes_alive() == 1, timeout=20)
    emu.stop()
    assert emu.processes_alive() == 0


def test_kubectl_lists_pods_and_jobs_with_server_side_columns() -> None:
    kubectl_path = require_program("kubectl", "kubectl", INSTALL_DEPS)
    with KubeEmulator(nodes=[NodeSpec("n1")], tenants=["ops"], tls=True) as emu:
        core = client.CoreV1Api(emu.tenant("ops").api_client())
        core.create_namespaced_pod("default", python_pod("listed", "print('hi')"))
        emu.wait_for(
            lambda: core.read_namespaced_pod("listed", "default").status.phase == "Succeeded"
        )

        def kubectl(*args: str) -> str:
            command = [kubectl_path, "--kubeconfig", emu.tenant("ops").kubeconfig_path, *args]
            done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=True)
            return done.stdout

        pods = kubectl("get", "pods")
        assert pods.split("\n")[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
        assert pods.split("\n")[1].split()[:3] == ["listed", "0/1", "Completed"]
        wide = kubectl("get", "pods", "-o", "wide").split("\n")
        assert wide[0].split()[5:7] == ["IP", "NODE"] and wide[1].split()[6] == "n1"
        assert kubectl("get", "all").split("\n")[1].split()[0] == "pod/listed"
        assert kubectl("logs", "listed") == "hi\n"
        kubectl("get", "jobs")
