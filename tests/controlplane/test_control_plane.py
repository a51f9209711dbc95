"""The real control plane serves v1.37.2 and keeps host and tenant apart."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config

from k8s_ai_orchestrator.testing.controlplane import ApiServer, ControlPlane

# under CI the first test may build the binary
pytestmark = [pytest.mark.controlplane, pytest.mark.timeout(2400)]


def _api(server: ApiServer) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(server.kubeconfig))


def _namespaces(api: client.ApiClient) -> set[str]:
    return {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}


def test_host_and_tenant_apiservers_report_kubernetes_v1_37_2(
    host: ApiServer, tenant: ApiServer
) -> None:
    for server in (host, tenant):
        with _api(server) as api:
            info = client.VersionApi(api).get_code()
        assert (info.git_version, info.major, info.minor) == ("v1.37.2", "1", "37")


def test_a_namespace_made_in_a_tenant_is_invisible_on_the_host(
    host: ApiServer, tenant: ApiServer
) -> None:
    name = f"ns-{uuid.uuid4().hex[:8]}"
    with _api(tenant) as api:
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata={"name": name}))
        assert name in _namespaces(api)
    with _api(host) as api:
        assert name not in _namespaces(api)
        client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata={"name": name}))
        assert client.CoreV1Api(api).read_namespace(name).status.phase == "Active"


def test_default_service_accounts_exist_so_pods_can_be_admitted(
    host: ApiServer, tenant: ApiServer
) -> None:
    for server in (host, tenant):
        with _api(server) as api:
            account = client.CoreV1Api(api).read_namespaced_service_account("default", "default")
        assert account.metadata.name == "default"


def _processes_in_groups(groups: set[int]) -> list[int]:
    """Pids of live processes whose process group is one of `groups`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) in groups:  # fields after "pid (comm)": state, ppid, pgrp
            found.append(int(stat.parent.name))
    return found


def test_stop_leaves_no_process_behind(kubeplane_bin_dir: Path) -> None:
    run_dir = Path(tempfile.mkdtemp(prefix="k8sai-controlplane-"))
    plane = ControlPlane(kubeplane_bin_dir, run_dir).start()
    groups = {c.pid for c in plane.components if c.pid is not None}
    assert len(_processes_in_groups(groups)) == len(plane.components) == 4
    plane.stop()
    assert _processes_in_groups(groups) == []
    shutil.rmtree(run_dir)
