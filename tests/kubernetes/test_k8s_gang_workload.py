"""Gang admission through the Kubernetes gang-scheduling API (`gang_admission.mode: workload`):
on the real v1.37 control plane with `GenericWorkload`, the Job is created at once with a
PodGroup and kube-scheduler binds all of a gang's pods or none. That needs the scheduler to see
the PodGroup: the tenant here is the host cluster itself (a cluster without vCluster). Through a
vCluster-style syncer, which like vCluster's own copies no PodGroups and drops the pods'
`schedulingGroup`, the host places a gang's pods one by one: the executor refuses `workload` on
vCluster tenants (tests/kubernetes/test_k8s_config.py). Where PodGroups are not served (the
emulator) the step is refused before anything is created."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gang_support import (
    GangTarget,
    emulated_gang_target,
    gang_step,
    gpu_pod,
    make_backend,
    run_gang_code,
    wait_status,
)
from k8s_support import NAMESPACE, install_priority_classes, tenant_config
from kubernetes import client

from k8s_ai_orchestrator.backends.base import StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend
from k8s_ai_orchestrator.errors import SubmitError

pytestmark = pytest.mark.timeout(400)


@pytest.fixture
def plane(gang_plane: Any, tmp_path: Path) -> GangTarget:
    """The gang plane's host as the tenant `team-a`, with the chart's PriorityClasses."""
    kube = gang_plane.fresh()
    try:
        install_priority_classes(kube.host.api_client())
    except client.ApiException as error:
        if error.status != 409:  # made by an earlier test of the session
            raise
    host_config = {"kubeconfig": kube.host.kubeconfig_path, "namespace": NAMESPACE}

    def config(**overrides: Any) -> dict[str, Any]:
        gang = {"gpu_tolerations": [], "gang_workdir": str(tmp_path)}
        return tenant_config(
            kube, **{**gang, "tenants": {"team-a": dict(host_config)}, **overrides}
        )

    return GangTarget(
        name="control-plane host",
        config=config,
        core=lambda tenant: client.CoreV1Api(kube.host.api_client()),
        pods=lambda tenant: kube.pods("host", NAMESPACE),
        jobs=lambda tenant: kube.jobs("host", NAMESPACE),
        wait_for=kube.wait_for,
        processes_alive=kube.processes_alive,
        evict=lambda tenant, pod: kube.evict_pod("host", NAMESPACE, pod),
    )


@pytest.fixture
def emulated(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[GangTarget]:
    with emulated_gang_target(tmp_path, request) as target:
        yield target


def workload_backend(target: GangTarget) -> KubernetesBackend:
    """A backend whose tenants admit gangs through PodGroups."""
    tenants = target.config()["tenants"]
    for settings in tenants.values():
        settings["gang_admission"] = {"mode": "workload"}
    return make_backend(target, tenants=tenants)


def podgroups(api_client: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    found = client.CustomObjectsApi(api_client).list_namespaced_custom_object(
        "scheduling.k8s.io", "v1beta1", namespace, "podgroups"
    )
    return list(found["items"])


def raw_pods(api_client: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    answer = client.CoreV1Api(api_client).list_namespaced_pod(namespace, _preload_content=False)
    return list(json.loads(answer.data)["items"])


@pytest.mark.controlplane
def test_a_workload_gang_runs_every_rank_through_its_podgroup(
    plane: GangTarget, gang_plane: Any, tmp_path: Path
) -> None:
    backend = workload_backend(plane)
    out = tmp_path / "ranks"
    out.mkdir()
    code = run_gang_code("record_rank", str(out))
    handle = backend.submit(gang_step(code, run_id="wl-ranks", gpus_per_node=2))
    try:
        host = gang_plane.host.api_client()
        (group,) = [g for g in podgroups(host, NAMESPACE) if g["metadata"]["name"] == handle.job_id]
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
        assert group["metadata"]["ownerReferences"][0]["kind"] == "Job"
        status = wait_status(plane, backend, handle, lambda s: s.is_terminal)
        assert status.state == StepState.SUCCEEDED, status
        ranks = sorted(json.loads(p.read_text())["RANK"] for p in out.glob("rank-*.json"))
        assert ranks == ["0", "1"]
        groups = {
            (p["spec"].get("schedulingGroup") or {}).get("podGroupName")
            for p in raw_pods(host, NAMESPACE)
            if handle.job_id in p["metadata"]["name"]
        }
        assert groups == {handle.job_id}
    finally:
        backend.cancel(handle)
        backend.close()


@pytest.mark.controlplane
def test_a_vcluster_style_syncer_carries_no_gang_to_the_host(gang_plane: Any) -> None:
    """As vCluster's own syncer: a tenant pod's `schedulingGroup` does not reach its host copy,
    and no PodGroup is copied, so the host scheduler would place a tenant's gang pod by pod."""
    kube = gang_plane.fresh()
    tenant, host = kube.tenant("team-a").api_client(), kube.host.api_client()
    group = {
        "metadata": {"name": "g-carried"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
    }
    client.CustomObjectsApi(tenant).create_namespaced_custom_object(
        "scheduling.k8s.io", "v1beta1", NAMESPACE, "podgroups", group
    )
    pod = {
        "metadata": {"name": "p-carried"},
        "spec": {
            "schedulingGroup": {"podGroupName": "g-carried"},
            "containers": [{"name": "main", "image": "x", "command": ["sleep", "1"]}],
        },
    }
    client.CoreV1Api(tenant).create_namespaced_pod(NAMESPACE, pod)
    try:
        host_ns = kube.host_namespace("team-a")

        def copied() -> list[dict[str, Any]]:
            return [p for p in raw_pods(host, host_ns) if "p-carried" in p["metadata"]["name"]]

        (copy,) = kube.wait_for(copied, 60)
        assert "schedulingGroup" not in copy["spec"]
        assert [g for g in podgroups(host, host_ns) if "g-carried" in g["metadata"]["name"]] == []
    finally:
        client.CoreV1Api(tenant).delete_namespaced_pod(
            "p-carried", NAMESPACE, grace_period_seconds=0
        )


@pytest.mark.controlplane
def test_the_scheduler_binds_none_of_a_workload_gang_until_every_pod_fits(
    plane: GangTarget,
) -> None:
    """node-b's GPUs are held: guard mode would not create the Job; workload mode creates it,
    and kube-scheduler keeps both pods unbound (no GPU held on node-a) until node-b frees."""
    plane.core("team-a").create_namespaced_pod(
        NAMESPACE, gpu_pod("holds-node-b", "node-b", "k8s-ai-standard")
    )
    plane.wait_for(lambda: any(p["spec"].get("nodeName") for p in plane.pods("team-a")), 120)
    backend = workload_backend(plane)
    handle = backend.submit(
        gang_step(run_gang_code("sleep_rank", 0), run_id="wl-holds", gpus_per_node=4)
    )
    try:
        assert [j for j in plane.jobs("team-a") if j["metadata"]["name"] == handle.job_id]

        last: list[Any] = []

        def explained() -> Any:
            status = backend.status(handle)
            scheduled = [(p["status"].get("conditions") or [{}])[0] for p in plane.pods("team-a")]
            last[:] = [status, [c.get("message") for c in scheduled]]
            return status if "pod group is unschedulable" in status.message else None

        try:
            status = plane.wait_for(explained, timeout=120)
        except TimeoutError:
            raise AssertionError(f"never explained: {last}") from None
        assert status.state == StepState.PENDING, status
        assert "minCount (2) cannot be satisfied" in status.message
        time.sleep(3)
        gang = [p for p in plane.pods("team-a") if handle.job_id in p["metadata"]["name"]]
        assert len(gang) == 2 and not [p for p in gang if p["spec"].get("nodeName")]
        plane.core("team-a").delete_namespaced_pod(
            "holds-node-b", NAMESPACE, grace_period_seconds=0
        )
        status = wait_status(plane, backend, handle, lambda s: s.is_terminal)
        assert status.state == StepState.SUCCEEDED, status
    finally:
        backend.cancel(handle)
        backend.close()


@pytest.mark.emulator
def test_workload_mode_is_refused_before_anything_is_created_where_podgroups_are_not_served(
    emulated: GangTarget,
) -> None:
    backend = workload_backend(emulated)
    try:
        with pytest.raises(SubmitError) as refused:
            backend.submit(gang_step(run_gang_code("sleep_rank", 0), run_id="wl-none"))
    finally:
        backend.close()
    message = str(refused.value)
    assert "tenant 'team-a' uses gang_admission.mode=workload" in message
    assert "does not serve scheduling.k8s.io/v1beta1 PodGroups" in message
    assert "GenericWorkload" in message and "gang_admission.mode=guard" in message
    assert emulated.jobs("team-a") == []
