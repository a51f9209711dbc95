"""The contract's API checks: what an API server answers without any node running pods.

Each check was written from the answers of a real Kubernetes v1.37.2 API server (the control
plane of `k8s_ai_orchestrator.testing.controlplane`) and holds on the emulator too.

Example:
    >>> [check.__name__ for check in API_CHECKS][:2]
    ['check_watch_resumes_from_a_list', 'check_paged_list_continues_after_the_last_key']
"""

from __future__ import annotations

from collections.abc import Callable

from kubernetes import client, watch

from tests.contract_support.contract_target import ContractTarget, request, status_of
from tests.contract_support.contract_validation import VALIDATION_CHECKS

PARTIAL_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
PARTIAL_ONE = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
APPLY = "application/apply-patch+yaml"


def check_watch_resumes_from_a_list(target: ContractTarget) -> None:
    """A watch from a list's resourceVersion sees what was created after the list."""
    core, ns = target.core(), target.namespace
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="contract-watched"))
    core.create_namespaced_config_map(ns, body)
    stream = watch.Watch().stream(
        core.list_namespaced_config_map, ns, resource_version=start, timeout_seconds=2
    )
    seen = [(e["type"], e["object"].metadata.name) for e in stream]
    assert ("ADDED", "contract-watched") in seen


def check_paged_list_continues_after_the_last_key(target: ContractTarget) -> None:
    """A list with `limit` pages by `continue`; every page carries the first page's
    resourceVersion, deleting an object already listed skips none of the rest, and under a
    label selector the remaining count is left out."""
    core, ns = target.core(), target.namespace
    for index in range(5):
        meta = client.V1ObjectMeta(name=f"contract-page-{index}", labels={"contract": "paged"})
        core.create_namespaced_config_map(ns, client.V1ConfigMap(metadata=meta))
    pages = {"label_selector": "contract=paged", "limit": 2}
    first = core.list_namespaced_config_map(ns, **pages)
    assert [c.metadata.name for c in first.items] == ["contract-page-0", "contract-page-1"]
    assert first.metadata._continue
    assert first.metadata.remaining_item_count is None  # unknown under a selector
    core.delete_namespaced_config_map("contract-page-0", ns)
    second = core.list_namespaced_config_map(ns, **pages, _continue=first.metadata._continue)
    assert [c.metadata.name for c in second.items] == ["contract-page-2", "contract-page-3"]
    assert second.metadata.resource_version == first.metadata.resource_version
    last = core.list_namespaced_config_map(ns, **pages, _continue=second.metadata._continue)
    assert [c.metadata.name for c in last.items] == ["contract-page-4"]
    assert not last.metadata._continue


def check_watch_from_compacted_history_expires(target: ContractTarget) -> None:
    """A watch from resourceVersion 1, long compacted away, ends with 410 Expired.

    Only where history before the start is compacted: the emulator at once, a real cluster
    after its first compaction (kube-apiserver's --etcd-compaction-interval, 5 min by default).
    """
    core, ns = target.core(), target.namespace
    try:
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map, ns, resource_version="1", timeout_seconds=2
            )
        )
    except client.ApiException as error:
        assert error.status == 410
    else:
        raise AssertionError("a watch from resourceVersion 1 did not expire")


def check_bad_input_answers(target: ContractTarget) -> None:
    """Strict unknown fields: 400; no containers or a non-DNS name: 422; bad selector: 400."""
    core, ns = target.core(), target.namespace
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "contract-strict-fields"},
        "spec": {"foo": 1, "containers": [{"name": "c", "image": target.image}]},
    }
    code, message = status_of(
        lambda: core.create_namespaced_pod(ns, pod, field_validation="Strict")
    )
    assert code == 400 and 'unknown field "spec.foo"' in message
    empty = client.V1Pod(
        metadata=client.V1ObjectMeta(name="contract-empty"), spec=client.V1PodSpec(containers=[])
    )
    assert status_of(lambda: core.create_namespaced_pod(ns, empty))[0] == 422
    bad_name = target.pod("Contract_Bad", "pass")
    assert status_of(lambda: core.create_namespaced_pod(ns, bad_name))[0] == 422
    code, message = status_of(lambda: core.list_namespaced_pod(ns, field_selector="spec.foo=x"))
    assert code == 400 and "field label not supported" in message


def _config_map(name: str, value: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"a": value},
    }


def check_emptied_metadata_lists_are_dropped(target: ContractTarget) -> None:
    """`finalizers` and `labels` written empty (the usual way to release an object) read back
    absent, not as `[]` and `{}`: the server's JSON omits empty ObjectMeta fields."""
    path = f"/api/v1/namespaces/{target.namespace}/configmaps"
    held = _config_map("contract-released", "1")
    held["metadata"] = {
        "name": "contract-released",
        "finalizers": ["example.com/hold"],
        "labels": {"team": "a"},
    }
    created = request(target, "POST", path, held)
    assert created.status == 201, created
    emptied = [
        {"op": "replace", "path": "/metadata/finalizers", "value": []},
        {"op": "replace", "path": "/metadata/labels", "value": {}},
    ]
    patched = request(
        target, "PATCH", f"{path}/contract-released", emptied, "application/json-patch+json"
    )
    assert patched.status == 200, patched
    assert "finalizers" not in patched.body["metadata"], patched.body["metadata"]
    assert "labels" not in patched.body["metadata"], patched.body["metadata"]
    read = request(target, "GET", f"{path}/contract-released")
    assert not {"finalizers", "labels"} & set(read.body["metadata"]), read.body["metadata"]
    assert request(target, "DELETE", f"{path}/contract-released").status == 200


def check_server_side_apply_creates_missing_object(target: ContractTarget) -> None:
    """An apply patch of a missing object creates it (201), then updates it (200).

    Without `fieldManager` it is 422 Invalid; a body naming another object is 400.
    """
    path = f"/api/v1/namespaces/{target.namespace}/configmaps"
    first = request(
        target,
        "PATCH",
        f"{path}/contract-applied?fieldManager=contract",
        _config_map("contract-applied", "1"),
        APPLY,
    )
    assert (first.status, first.body["data"]) == (201, {"a": "1"}), first
    again = request(
        target,
        "PATCH",
        f"{path}/contract-applied?fieldManager=contract",
        _config_map("contract-applied", "2"),
        APPLY,
    )
    assert (again.status, again.body["data"]) == (200, {"a": "2"}), again
    nameless = request(
        target, "PATCH", f"{path}/contract-unmanaged", _config_map("contract-unmanaged", "1"), APPLY
    )
    assert (nameless.status, nameless.body["reason"]) == (422, "Invalid"), nameless
    assert nameless.body["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for '
        "apply patch"
    )
    other = request(
        target,
        "PATCH",
        f"{path}/contract-other?fieldManager=contract",
        _config_map("contract-applied", "3"),
        APPLY,
    )
    assert other.status == 400, other
    assert other.body["message"] == (
        "the name of the object (contract-applied) does not match the name on the URL "
        "(contract-other)"
    )


def check_metadata_only_list(target: ContractTarget) -> None:
    """`as=PartialObjectMetadataList` lists metadata only; asking it of one object is 406."""
    core, ns = target.core(), target.namespace
    core.create_namespaced_config_map(ns, _config_map("contract-meta", "1"))
    path = f"/api/v1/namespaces/{ns}/configmaps"
    listed = request(target, "GET", path, accept=PARTIAL_LIST)
    assert listed.status == 200, listed
    assert (listed.body["kind"], listed.body["apiVersion"]) == (
        "PartialObjectMetadataList",
        "meta.k8s.io/v1",
    )
    assert listed.body["metadata"]["resourceVersion"]
    mine = [i for i in listed.body["items"] if i["metadata"]["name"] == "contract-meta"]
    assert len(mine) == 1 and set(mine[0]) == {"kind", "apiVersion", "metadata"}, mine
    assert (mine[0]["kind"], mine[0]["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
    one = request(target, "GET", f"{path}/contract-meta", accept=PARTIAL_ONE)
    assert (one.status, one.body["kind"], "data" in one.body) == (
        200,
        "PartialObjectMetadata",
        False,
    )
    wrong = request(target, "GET", f"{path}/contract-meta", accept=PARTIAL_LIST)
    assert (wrong.status, wrong.body["reason"]) == (406, "NotAcceptable"), wrong
    assert wrong.body["message"].startswith(
        "you requested PartialObjectMetadataList, but the requested object is not a list"
    )


def check_dry_run_changes_nothing(target: ContractTarget) -> None:
    """`dryRun=All` answers as if it wrote, on POST, PUT, PATCH and DELETE, and writes nothing."""
    core, ns = target.core(), target.namespace
    made = core.create_namespaced_config_map(ns, _config_map("contract-dry", "1"))
    version = made.metadata.resource_version
    ghost = core.create_namespaced_config_map(ns, _config_map("contract-ghost", "1"), dry_run="All")
    assert ghost.metadata.name == "contract-ghost"
    assert status_of(lambda: core.read_namespaced_config_map("contract-ghost", ns))[0] == 404
    patched = core.patch_namespaced_config_map(
        "contract-dry", ns, {"data": {"a": "2"}}, dry_run="All"
    )
    replaced = core.replace_namespaced_config_map(
        "contract-dry", ns, _config_map("contract-dry", "3"), dry_run="All"
    )
    assert (patched.data, replaced.data) == ({"a": "2"}, {"a": "3"})
    deleted = core.delete_namespaced_config_map("contract-dry", ns, dry_run="All")
    assert deleted.status == "Success"
    core.delete_collection_namespaced_config_map(ns, dry_run="All")
    kept = core.read_namespaced_config_map("contract-dry", ns)
    assert (kept.data, kept.metadata.resource_version) == ({"a": "1"}, version)
    job = target.job("contract-dry-job", "pass", suspend=True)
    target.batch().create_namespaced_job(ns, job)
    target.batch().delete_namespaced_job(
        "contract-dry-job", ns, dry_run="All", propagation_policy="Background"
    )
    assert (
        target.batch().read_namespaced_job("contract-dry-job", ns).metadata.deletion_timestamp
        is None
    )
    bad = request(target, "DELETE", f"/api/v1/namespaces/{ns}/configmaps/contract-dry?dryRun=Yes")
    assert (bad.status, bad.body["reason"]) == (422, "Invalid"), bad
    assert bad.body["message"] == (
        'DeleteOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: ["Yes"]: '
        'supported values: "All"'
    )


def _discovered(target: ContractTarget, path: str) -> dict[str, dict[str, object]]:
    answer = request(target, "GET", path)
    return {r["name"]: r for r in answer.body["resources"]}


def check_discovery_has_categories(target: ContractTarget) -> None:
    """Pods and Jobs are in category `all` (`kubectl get all`); ConfigMaps are not."""
    core = _discovered(target, "/api/v1")
    batch = _discovered(target, "/apis/batch/v1")
    assert core["pods"].get("categories") == ["all"]
    assert batch["jobs"].get("categories") == ["all"]
    assert "categories" not in core["configmaps"]
    assert (core["pods"]["shortNames"], core["pods"]["singularName"]) == (["po"], "pod")


_COLUMNS = {
    "pods": [
        ("Name", 0), ("Ready", 0), ("Status", 0), ("Restarts", 0), ("Age", 0),
        ("IP", 1), ("Node", 1), ("Nominated Node", 1), ("Readiness Gates", 1),
    ],
    "jobs": [
        ("Name", 0), ("Status", 0), ("Completions", 0), ("Duration", 0), ("Age", 0),
        ("Containers", 1), ("Images", 1), ("Selector", 1),
    ],
    "nodes": [
        ("Name", 0), ("Status", 0), ("Roles", 0), ("Age", 0), ("Version", 0),
        ("Internal-IP", 1), ("External-IP", 1), ("OS-Image", 1), ("Kernel-Version", 1),
        ("Container-Runtime", 1),
    ],
}  # fmt: skip


def check_tables_have_kubectl_columns(target: ContractTarget) -> None:
    """`kubectl get` Tables of pods, jobs and nodes have the real columns (NODE with -o wide)."""
    ns = target.namespace
    target.batch().create_namespaced_job(ns, target.job("contract-table", "pass", suspend=True))
    target.core().create_namespaced_pod(ns, target.pod("contract-table", "pass"))
    paths = {
        "pods": f"/api/v1/namespaces/{ns}/pods",
        "jobs": f"/apis/batch/v1/namespaces/{ns}/jobs",
        "nodes": "/api/v1/nodes",
    }
    for plural, path in paths.items():
        table = request(target, "GET", path, accept=TABLE).body
        assert (table["kind"], table["apiVersion"]) == ("Table", "meta.k8s.io/v1"), table
        columns = [(c["name"], c["priority"]) for c in table["columnDefinitions"]]
        assert columns == _COLUMNS[plural], f"{plural}: {columns}"
        for row in table["rows"]:
            assert len(row["cells"]) == len(columns)
            assert row["object"]["kind"] == "PartialObjectMetadata"
        if plural != "nodes":
            assert [row["cells"][0] for row in table["rows"]] == ["contract-table"], table["rows"]
    cells = request(target, "GET", f"{paths['jobs']}/contract-table", accept=TABLE).body["rows"]
    assert (cells[0]["cells"][0], cells[0]["cells"][2]) == ("contract-table", "0/1"), cells


Check = Callable[[ContractTarget], None]

HISTORY_CHECKS: tuple[Check, ...] = (check_watch_from_compacted_history_expires,)
"""Checks that need a server whose oldest history is compacted (not a freshly started one)."""

API_CHECKS: tuple[Check, ...] = (
    check_watch_resumes_from_a_list,
    check_paged_list_continues_after_the_last_key,
    check_bad_input_answers,
    check_server_side_apply_creates_missing_object,
    check_emptied_metadata_lists_are_dropped,
    check_metadata_only_list,
    check_dry_run_changes_nothing,
    check_discovery_has_categories,
    check_tables_have_kubectl_columns,
    *VALIDATION_CHECKS,
)
"""Checks that need only an API server (no node runs anything)."""
