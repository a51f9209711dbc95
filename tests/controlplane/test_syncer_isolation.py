"""Our syncer's pass, without a plane: one pod that fails to sync never holds up the others
(vCluster's syncer requeues per object), and its error is kept for `describe`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
