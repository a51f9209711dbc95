"""Verbs, patches, selectors, deletion propagation and the API server's answers to bad input."""

from __future__ import annotations

import json

import pytest
import urllib3
from emu_support import python_job, python_pod
from kubernetes import client

from k8s_ai_orchestrator.testing.kube import KubeEmulator

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]


def _cm(name: str, labels: dict[str, str] | None = None) -> client.V1ConfigMap:
    return client.V1ConfigMap(
        metadata=client.V1ObjectMeta(name=name, labels=labels), data={"a": "1"}
    )


def raw(
    emu: KubeEmulator, method: str, path: str, body: bytes = b"", ctype: str = "application/json"
):
    """An HTTP request with the tenant's token, returning (status, decoded JSON)."""
    server = emu.tenant("team-a")
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": ctype}
    response = urllib3.request(method, server.server_url + path, body=body, headers=headers)
    return response.status, json.loads(response.data)


def test_create_get_update_and_delete_a_configmap(core: client.CoreV1Api, ns: str) -> None:
    created = core.create_namespaced_config_map(ns, _cm("settings"))
    assert created.metadata.uid and created.metadata.resource_version
    created.data["b"] = "2"
    updated = core.replace_namespaced_config_map("settings", ns, created)
    assert int(updated.metadata.resource_version) > int(created.metadata.resource_version)
    assert core.read_namespaced_config_map("settings", ns).data == {"a": "1", "b": "2"}
    core.delete_namespaced_config_map("settings", ns)
    with pytest.raises(client.ApiException) as raised:
        core.read_namespaced_config_map("settings", ns)
    assert raised.value.status == 404


def test_a_stale_update_conflicts_and_a_duplicate_create_already_exists(
    core: client.CoreV1Api, ns: str
) -> None:
    first = core.create_namespaced_config_map(ns, _cm("c1"))
    core.patch_namespaced_config_map("c1", ns, {"data": {"x": "y"}})
    with pytest.raises(client.ApiException) as stale:
        core.replace_namespaced_config_map("c1", ns, first)
    assert stale.value.status == 409
    with pytest.raises(client.ApiException) as duplicate:
        core.create_namespaced_config_map(ns, _cm("c1"))
    assert json.loads(duplicate.value.body)["reason"] == "AlreadyExists"


def test_generate_name_gets_a_random_suffix(core: client.CoreV1Api, ns: str) -> None:
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(generate_name="run-"))
    created = core.create_namespaced_config_map(ns, body)
    assert created.metadata.name.startswith("run-") and len(created.metadata.name) == 9


def test_the_three_patch_types(core: client.CoreV1Api, ns: str) -> None:
    pod = python_pod("patched", "pass")
    pod.spec.node_name = "nowhere"  # bound to a node that does not exist: nothing runs
    pod.metadata.labels = {"a": "1"}
    core.create_namespaced_pod(ns, pod)
    core.patch_namespaced_pod("patched", ns, {"metadata": {"labels": {"b": "2"}}})
    core.patch_namespaced_pod(
        "patched", ns, [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}]
    )
    strategic = {"spec": {"containers": [{"name": "main", "image": "python:3.12"}]}}
    patched = core.patch_namespaced_pod("patched", ns, strategic)
    assert patched.metadata.labels == {"a": "1", "b": "2"}
    assert patched.metadata.annotations == {"k": "v"}
    assert [c.image for c in patched.spec.containers] == ["python:3.12"]
    assert patched.spec.containers[0].command  # merged by name, not replaced


def test_json_merge_patch_null_deletes_a_key(emu: KubeEmulator, core, ns: str) -> None:
    core.create_namespaced_config_map(ns, _cm("m", {"x": "1", "y": "2"}))
    body = json.dumps({"metadata": {"labels": {"x": None}}}).encode()
    status, result = raw(
        emu, "PATCH", f"/api/v1/namespaces/{ns}/configmaps/m", body, "application/merge-patch+json"
    )
    assert status == 200 and result["metadata"]["labels"] == {"y": "2"}


def test_label_selectors(core: client.CoreV1Api, ns: str) -> None:
    for name, labels in [("a", {"tier": "web", "env": "prod"}), ("b", {"tier": "db"}), ("c", {})]:
        core.create_namespaced_config_map(ns, _cm(name, labels))

    def names(selector: str) -> list[str]:
        items = core.list_namespaced_config_map(ns, label_selector=selector).items
        return sorted(cm.metadata.name for cm in items if cm.metadata.name != "kube-root-ca.crt")

    assert names("tier=web") == ["a"]
    assert names("tier!=web") == ["b", "c"]
    assert names("tier in (web, db)") == ["a", "b"]
    assert names("tier notin (web)") == ["b", "c"]
    assert names("env") == ["a"]
    assert names("!tier") == ["c"]


def test_field_selectors_and_an_unsupported_one(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, python_pod("fs-1", "pass"))
    found = core.list_namespaced_pod(ns, field_selector="metadata.name=fs-1").items
    assert [pod.metadata.name for pod in found] == ["fs-1"]
    assert core.list_namespaced_pod(ns, field_selector="metadata.name!=fs-1").items == []
    with pytest.raises(client.ApiException) as raised:
        core.list_namespaced_pod(ns, field_selector="spec.containers=x")
    assert raised.value.status == 400
    assert "field label not supported: spec.containers" in json.loads(raised.value.body)["message"]


def test_list_pages_with_limit_and_continue(core: client.CoreV1Api, ns: str) -> None:
    for index in range(5):
        core.create_namespaced_secret(
            ns, client.V1Secret(metadata=client.V1ObjectMeta(name=f"s{index}"))
        )
    first = core.list_namespaced_secret(ns, limit=3)
    rest = core.list_namespaced_secret(ns, limit=3, _continue=first.metadata._continue)
    assert [s.metadata.name for s in first.items + rest.items] == [f"s{i}" for i in range(5)]


def test_deleting_a_job_orphans_its_pods_unless_propagation_is_given(
    emu: KubeEmulator, batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    for name in ("orphaning", "background"):
        batch.create_namespaced_job(ns, python_job(name, "import time; time.sleep(60)"))
    emu.wait_for(lambda: len(core.list_namespaced_pod(ns).items) == 2)
    batch.delete_namespaced_job("orphaning", ns)
    batch.delete_namespaced_job("background", ns, propagation_policy="Background")

    def left() -> list[client.V1Pod]:
        return core.list_namespaced_pod(ns).items

    emu.wait_for(lambda: len(left()) == 1, timeout=40)
    orphan = left()[0]
    assert orphan.metadata.labels["job-name"] == "orphaning"
    assert not orphan.metadata.owner_references
    core.delete_namespaced_pod(orphan.metadata.name, ns, grace_period_seconds=0)


def test_malformed_json_is_a_400_status(emu: KubeEmulator, ns: str) -> None:
    status, body = raw(emu, "POST", f"/api/v1/namespaces/{ns}/pods", b"{not json")
    assert status == 400 and body["kind"] == "Status" and body["reason"] == "BadRequest"


def test_unknown_fields_are_rejected_under_strict_field_validation(emu: KubeEmulator, ns) -> None:
    pod = {
        "metadata": {"name": "strict"},
        "spec": {"foo": 1, "containers": [{"name": "c", "image": "i"}]},
    }
    path = f"/api/v1/namespaces/{ns}/pods?fieldValidation=Strict"
    status, body = raw(emu, "POST", path, json.dumps(pod).encode())
    assert status == 400
    assert 'strict decoding error: unknown field "spec.foo"' in body["message"]
    status, body = raw(emu, "POST", f"/api/v1/namespaces/{ns}/pods", json.dumps(pod).encode())
    assert status == 201 and "foo" not in body["spec"]


def test_a_pod_without_containers_is_invalid(emu: KubeEmulator, ns: str) -> None:
    pod = {"metadata": {"name": "empty"}, "spec": {"containers": []}}
    status, body = raw(emu, "POST", f"/api/v1/namespaces/{ns}/pods", json.dumps(pod).encode())
    assert status == 422 and body["reason"] == "Invalid"
    assert body["message"] == 'Pod "empty" is invalid: spec.containers: Required value'


def test_a_non_dns_name_is_invalid(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod(ns, python_pod("Bad_Name", "pass"))
    assert raised.value.status == 422
    assert 'metadata.name: Invalid value: "Bad_Name"' in json.loads(raised.value.body)["message"]


def test_a_name_with_a_trailing_newline_is_invalid_as_on_a_real_server(
    core: client.CoreV1Api, ns: str
) -> None:
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod(ns, python_pod("tile\n", "pass"))
    assert raised.value.status == 422


def test_creating_in_a_missing_namespace_is_not_found(core: client.CoreV1Api) -> None:
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_config_map("no-such-ns", _cm("x"))
    assert raised.value.status == 404
    assert json.loads(raised.value.body)["message"] == 'namespaces "no-such-ns" not found'
