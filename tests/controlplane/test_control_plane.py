"""The real control plane serves v1.37.2 and keeps host and tenant apart."""

from __future__ import annotations

import itertools
import shutil
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config

from k8s_ai_orchestrator.testing.controlplane import ApiServer, ControlPlane
from k8s_ai_orchestrator.testing.controlplane.patches import terminating

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


def test_a_namespace_being_deleted_refuses_new_events_as_our_syncer_expects(
    tenant: ApiServer,
) -> None:
    """Our syncer drops an event copied into a tenant namespace that is being deleted
    (`patches.terminating`): the real API server's refusal is what it recognises."""
    name = f"going-{uuid.uuid4().hex[:8]}"
    with _api(tenant) as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata={"name": name}))
        held = {"metadata": {"name": "held", "finalizers": ["k8s-ai.test/hold"]}}
        core.create_namespaced_config_map(name, held)  # keeps the namespace terminating
        try:
            core.delete_namespace(name)
            refused = _first_refused_event(core, name)
            assert refused.status == 403 and terminating(refused), refused
            assert not terminating(client.ApiException(status=403, reason="Forbidden"))
        finally:
            core.patch_namespaced_config_map("held", name, {"metadata": {"finalizers": None}})


def _first_refused_event(core: client.CoreV1Api, namespace: str) -> client.ApiException:
    """Create events in `namespace` until the API refuses one (its admission sees the
    deletion a moment after the delete returns)."""
    deadline = time.monotonic() + 30
    for n in itertools.count():
        event = {
            "metadata": {"name": f"late.{n}"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": namespace},
            "reason": "Scheduled",
            "message": "copied late",
        }
        try:
            core.create_namespaced_event(namespace, event)
        except client.ApiException as error:
            return error
        assert time.monotonic() < deadline, f"{namespace}: every event taken for 30 s"
        time.sleep(0.2)
    raise AssertionError("unreachable")
