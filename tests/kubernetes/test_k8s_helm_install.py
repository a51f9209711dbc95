"""The tenant chart installed for real (helm-python-sdk) into a tenant and the host of the real
control plane; the executor then works with the chart's service-account token, not an admin's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_support import TENANTS, python_step, tenant_config, wait_terminal
from kubernetes import client, config

from k8s_ai_orchestrator.backends.base import StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.testing.controlplane import write_kubeconfig
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube

helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk")

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]

CHART = Path(__file__).parents[2] / "helm" / "k8s-ai-tenant"
TENANT = "team-b"
NAMESPACE = "pipelines"  # the chart's default step namespace


def _helm(kubeconfig: str, namespace: str) -> object:
    return helm.Config(kubeconfig_path=kubeconfig, namespace=namespace)


def _token(api: client.ApiClient, namespace: str, account: str) -> str:
    request = {"spec": {"audiences": [], "expirationSeconds": 3600}}
    answer = client.CoreV1Api(api).create_namespaced_service_account_token(
        account, namespace, request
    )
    return str(answer.status.token)


def _allowed(api: client.ApiClient, verb: str, resource: str, namespace: str) -> bool:
    review = {"spec": {"resourceAttributes": {"verb": verb, "namespace": namespace}}}
    group, _, plural = resource.rpartition("/") if "/" in resource else ("", "", resource)
    attributes = review["spec"]["resourceAttributes"]
    attributes.update(resource=plural, group=group)
    if resource in ("pods/log", "pods/resize"):
        attributes.update(resource="pods", subresource=resource.split("/")[1], group="")
    answer = client.AuthorizationV1Api(api).create_self_subject_access_review(review)
    return bool(answer.status.allowed)


@pytest.fixture(scope="module")
def installed(
    plane_with_nodes: RealKube, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """The chart in tenant team-b (PriorityClasses already there) and on the host; yields a
    kubeconfig holding the executor service account's token."""
    kube = plane_with_nodes
    tenant_kubeconfig = kube.tenant(TENANT).kubeconfig_path
    tenant_helm = _helm(tenant_kubeconfig, NAMESPACE)
    values = {"tenant": TENANT, "priorityClasses": {"create": False}}
    release = tenant_helm.install(CHART, "k8s-ai", values, create_namespace=True, timeout=120)
    host = kube.host
    host_core = client.CoreV1Api(host.api_client())
    host_core.create_namespace({"metadata": {"name": "dagster"}})
    host_core.create_namespaced_service_account("dagster", {"metadata": {"name": "dagster"}})
    host_values = {
        "tenant": TENANT,
        "tenantObjects": False,
        "namespace": {"create": False, "name": NAMESPACE},
        "priorityClasses": {"create": False},
        "hostSecretAccess": {"enabled": True, "namespace": kube.host_namespace(TENANT)},
    }
    host_helm = _helm(host.kubeconfig_path, kube.host_namespace(TENANT))
    host_helm.install(CHART, "k8s-ai-host", host_values, timeout=120)
    token = _token(kube.tenant(TENANT).api_client(), NAMESPACE, "k8s-ai-executor")
    server = kube.plane.tenants[TENANT]
    path = tmp_path_factory.mktemp("helm") / "executor.kubeconfig"
    write_kubeconfig(path, server.url, server.ca_file, "k8s-ai-executor", token)
    assert "kind: ResourceQuota" in release["manifest"]
    yield path
    tenant_helm.uninstall("k8s-ai")
    host_helm.uninstall("k8s-ai-host")


def test_the_executor_runs_a_step_with_the_charts_service_account_token(
    installed: Path, real_kube: RealKube
) -> None:
    raw = tenant_config(real_kube)
    raw["tenants"][TENANT] = {"kubeconfig": str(installed), "namespace": NAMESPACE}
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(raw), allowed_tenants=TENANTS, sleep=lambda s: None
    )
    try:
        handle = backend.submit(python_step("print('with the chart token')", tenant=TENANT))
        status = wait_terminal(real_kube, backend, handle)
        assert status.state == StepState.SUCCEEDED, status
        assert "with the chart token" in backend.logs(handle)
    finally:
        backend.close()


def test_the_charts_executor_role_grants_nothing_the_executor_does_not_need(
    installed: Path,
) -> None:
    api = config.new_client_from_config(config_file=str(installed))
    needed = [
        ("create", "batch/jobs"),
        ("delete", "batch/jobs"),
        ("watch", "pods"),
        ("get", "pods/log"),
        ("patch", "pods/resize"),
        ("create", "scheduling.k8s.io/podgroups"),
        ("list", "events"),
        ("list", "resourcequotas"),
    ]
    not_needed = [
        ("delete", "pods"),
        ("create", "pods"),
        ("patch", "pods"),
        ("get", "secrets"),
        ("create", "secrets"),
        ("update", "batch/jobs"),
        ("create", "rbac.authorization.k8s.io/roles"),
    ]
    assert all(_allowed(api, verb, what, NAMESPACE) for verb, what in needed)
    granted = [(verb, what) for verb, what in not_needed if _allowed(api, verb, what, NAMESPACE)]
    assert granted == []
    assert not _allowed(api, "create", "batch/jobs", "default")  # only its own namespace


def test_the_host_install_lets_the_executor_read_only_its_vcluster_secret(
    installed: Path, plane_with_nodes: RealKube
) -> None:
    kube = plane_with_nodes
    token = _token(kube.host.api_client(), "dagster", "dagster")
    server = kube.plane.host
    assert server is not None
    path = installed.parent / "host.kubeconfig"
    write_kubeconfig(path, server.url, server.ca_file, "dagster", token)
    core = client.CoreV1Api(config.new_client_from_config(config_file=str(path)))
    secret = core.read_namespaced_secret(f"vc-{TENANT}", kube.host_namespace(TENANT))
    assert json.loads(base64.b64decode(secret.data["config"]))["kind"] == "Config"
    with pytest.raises(client.ApiException) as refused:
        core.read_namespaced_secret(f"vc-{TENANTS[0]}", kube.host_namespace(TENANTS[0]))
    assert refused.value.status == 403
