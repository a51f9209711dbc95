"""Our syncer's pass, without a plane: one pod that fails to sync never holds up the others
(vCluster's syncer requeues per object), and its error is kept for `describe`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from k8s_ai_orchestrator.testing.controlplane.syncer.syncer import MAX_ERRORS, TenantSyncer


def tenant_pod(name: str, uid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns1", "uid": uid, "resourceVersion": "1"},
        "spec": {"containers": [{"name": "main"}]},
    }


def test_a_pod_whose_sync_fails_every_pass_does_not_stop_the_pods_after_it(
    tmp_path: Path,
) -> None:
    syncer = TenantSyncer(
        client.ApiClient(), client.ApiClient(), "team-b", tmp_path / "kc", {}.get, tmp_path
    )
    syncer.nodes.sync = lambda nodes: None  # type: ignore[method-assign]
    for name, uid in (("stuck", "u1"), ("next", "u2")):
        syncer.tenant_pods._apply("ADDED", tenant_pod(name, uid))
    synced: list[str] = []

    def sync_pod(pod: dict[str, Any]) -> None:
        if pod["metadata"]["name"] == "stuck":
            raise client.ApiException(status=422, reason="Unprocessable Entity")
        synced.append(pod["metadata"]["name"])

    syncer._sync_pod = sync_pod  # type: ignore[method-assign]
    for _ in range(MAX_ERRORS + 5):
        syncer.reconcile()

    assert synced == ["next"] * (MAX_ERRORS + 5)
    assert len(syncer.errors) == MAX_ERRORS  # the last ones, not one per pass for ever
    assert "Unprocessable Entity" in syncer.describe()


def host_event(name: str, pod: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "vcluster-team-b",
            "uid": name,
            "resourceVersion": "1",
        },
        "involvedObject": {"kind": "Pod", "name": pod, "uid": "host-uid"},
        "reason": "Scheduled",
        "message": "placed",
        "type": "Normal",
    }


def refusal(status: int, cause: str) -> client.ApiException:
    error = client.ApiException(status=status, reason="Forbidden")
    error.body = json.dumps(
        {"kind": "Status", "reason": "Forbidden", "details": {"causes": [{"reason": cause}]}}
    )
    return error


@pytest.mark.parametrize("cause", ["NamespaceTerminating", "SomethingElse"])
def test_an_event_the_tenant_refuses_never_keeps_a_pod_from_syncing(
    tmp_path: Path, cause: str
) -> None:
    """A tenant namespace being deleted takes no new event (403, `NamespaceTerminating`): the
    event is dropped. Any other refusal is kept for `describe` and tried again. Either way the
    pods of the pass still sync: one refused event once kept every pod of the tenant from
    syncing until that namespace was gone, and it waited for those very pods."""
    syncer = TenantSyncer(
        client.ApiClient(), client.ApiClient(), "team-b", tmp_path / "kc", {}.get, tmp_path
    )
    syncer.nodes.sync = lambda nodes: None  # type: ignore[method-assign]
    syncer.tenant_pods._apply("ADDED", tenant_pod("going", "u1"))
    syncer.host_events._apply("ADDED", host_event("ev1", "going-x-ns1-x-team-b"))
    writes: list[str] = []

    def create_event(namespace: str, body: Any, **kwargs: Any) -> None:
        writes.append(body["metadata"]["name"])
        raise refusal(403, cause)

    syncer.virtual.create_namespaced_event = create_event  # type: ignore[method-assign]
    synced: list[str] = []
    syncer._sync_pod = lambda pod: synced.append(pod["metadata"]["name"])  # type: ignore[method-assign]

    syncer.reconcile()
    syncer.reconcile()

    assert synced == ["going", "going"]
    dropped = cause == "NamespaceTerminating"
    assert len(writes) == (1 if dropped else 2)
    assert len(syncer.errors) == (0 if dropped else 2)
    if not dropped:
        assert "403 Forbidden" in syncer.describe()
