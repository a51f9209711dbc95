"""The tenant chart installed for real (helm-python-sdk) into a tenant and the host of the real
control plane; the executor then works with the chart's service-account token, not an admin's,
and grows a step in place with it although the chart's default refuses `get nodes/proxy`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from k8s_support import TENANTS, python_step, tenant_config, wait_terminal, wait_until
from kubernetes import client, config

from k8s_ai_orchestrator.backends.base import GrowOutcome, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.memorygrowth import MemoryGrowth
from k8s_ai_orchestrator.quantities import parse_memory
from k8s_ai_orchestrator.testing.controlplane import write_kubeconfig
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from tests.requirements import DEV_EXTRA, require_module

helm = require_module("helm_python", "the Helm SDK (helm-python-sdk)", DEV_EXTRA)

pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(300)]

CHART = Path(__file__).parents[2] / "helm" / "k8s-ai-tenant"
TENANT = "team-b"
NAMESPACE = "pipelines"  # the chart's default step namespace
MiB = 1024**2


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
    if resource in ("pods/log", "pods/resize", "nodes/proxy"):
        plural, subresource = resource.split("/")
        attributes.update(resource=plural, subresource=subresource, group="")
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


def _chart_backend(
    kubeconfig: Path, kube: RealKube, growth: MemoryGrowth | None = None
) -> KubernetesBackend:
    """A backend whose tenant team-b is reached with the chart's executor token."""
    raw = tenant_config(kube)
    raw["tenants"][TENANT] = {"kubeconfig": str(kubeconfig), "namespace": NAMESPACE}
    return KubernetesBackend(
        KubernetesConfig.from_dict(raw),
        allowed_tenants=TENANTS,
        sleep=lambda s: None,
        growth=growth,
    )


def test_the_executor_runs_a_step_with_the_charts_service_account_token(
    installed: Path, real_kube: RealKube
) -> None:
    backend = _chart_backend(installed, real_kube)
    try:
        handle = backend.submit(python_step("print('with the chart token')", tenant=TENANT))
        status = wait_terminal(real_kube, backend, handle)
        assert status.state == StepState.SUCCEEDED, status
        assert "with the chart token" in backend.logs(handle)
    finally:
        backend.close()


# ~400Mi in use (the interpreter with the reporter, which imports dagster: ~145Mi; 16 × 16Mi):
# past 0.6 × 512Mi, under 512Mi and 0.6 × 1Gi; held while the reports reach the executor and
# the resize reaches the node agent.
# Holds 320 MiB (with Python about 340 MiB: past 0.6 × 512Mi, below 512Mi) until the test
# has seen the growth (the file named in argv[1] appears), at most 60 s.
GROWS_ONCE = (
    "import os, sys, time; blocks = [bytearray(16 << 20) for _ in range(20)]\n"
    "for b in blocks: b[::4096] = b'x' * len(b[::4096])\n"
    "deadline = time.monotonic() + 60\n"
    "while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline: time.sleep(0.1)\n"
    "print('grew in place')"
)


def test_with_the_charts_default_token_a_step_grows_in_place_from_its_own_reports(
    installed: Path, real_kube: RealKube, tmp_path: Path
) -> None:
    """No `get nodes/proxy` (rbac.nodeProxy is off): the step's memory reports in its log,
    read with `get pods/log`, raise its limit 512Mi → 1Gi in the same pod, which succeeds."""
    assert not _allowed(
        config.new_client_from_config(config_file=str(installed)), "get", "nodes/proxy", ""
    )
    growth = MemoryGrowth(grow_at=0.6, factor=2.0, max_memory_bytes=1024 * MiB)
    backend = _chart_backend(installed, real_kube, growth=growth)
    try:
        seen = tmp_path / "growth-seen"
        step = python_step(GROWS_ONCE, tenant=TENANT, memory="512Mi")
        step = replace(
            step,
            command=[*step.command, str(seen)],
            env={**step.env, "K8S_AI_USAGE_INTERVAL_S": "0.2"},
        )
        handle = backend.submit(step)
        wait_until(
            real_kube,
            backend,
            handle,
            lambda s: (
                s.is_terminal
                or any(r.outcome is GrowOutcome.ACCEPTED for r in backend.resizes(handle))
            ),
        )
        seen.touch()
        status = wait_terminal(real_kube, backend, handle)
        resizes = backend.resizes(handle)
        assert status.state == StepState.SUCCEEDED, (status, resizes)
        assert "grew in place" in backend.logs(handle)
    finally:
        backend.close()
    grown = [(r.old_bytes, r.new_bytes) for r in resizes if r.outcome is GrowOutcome.ACCEPTED]
    assert grown == [(512 * MiB, 1024 * MiB)], resizes
    assert not any(r.outcome is GrowOutcome.REFUSED for r in resizes), resizes
    (pod,) = [
        p
        for p in real_kube.pods(TENANT, NAMESPACE)
        if p["metadata"]["labels"].get("k8s-ai/job") == handle.job_id
    ]  # one pod ran it to the end, restarted by nothing
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    limit = pod["spec"]["containers"][0]["resources"]["limits"]["memory"]
    assert parse_memory(limit) == 1024 * MiB  # the pod's own spec, resized in place


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
        ("create", "resource.k8s.io/resourceclaimtemplates"),
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
        ("create", "resource.k8s.io/resourceclaims"),  # the claim controller makes them
        ("delete", "resource.k8s.io/resourceclaimtemplates"),  # they go with their Jobs
    ]
    assert all(_allowed(api, verb, what, NAMESPACE) for verb, what in needed)
    granted = [(verb, what) for verb, what in not_needed if _allowed(api, verb, what, NAMESPACE)]
    assert granted == []
    assert not _allowed(api, "create", "batch/jobs", "default")  # only its own namespace


def test_by_default_the_executor_lists_nodes_but_cannot_reach_their_kubelets(
    installed: Path,
) -> None:
    """`get nodes/proxy` (exec-equivalent) needs the chart's opt-in rbac.nodeProxy."""
    api = config.new_client_from_config(config_file=str(installed))
    assert _allowed(api, "list", "nodes", "")  # the pre-flight node-size check
    assert not _allowed(api, "get", "nodes/proxy", "")
    # the pre-flight of gpus.request: dra steps, read only
    assert _allowed(api, "get", "resource.k8s.io/deviceclasses", "")
    assert _allowed(api, "list", "resource.k8s.io/resourceslices", "")
    assert not _allowed(api, "create", "resource.k8s.io/resourceslices", "")
    assert _allowed(api, "list", "resource.k8s.io/resourceclaims", "")  # the free devices
    assert not _allowed(api, "update", "resource.k8s.io/resourceclaims", "")


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
