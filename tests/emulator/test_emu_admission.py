"""Admission: ResourceQuota, LimitRange, PriorityClass defaults and access reviews."""

from __future__ import annotations

import json

import pytest
from emu_support import python_job, python_pod
from kubernetes import client

from k8s_ai_orchestrator.testing.kube import KubeEmulator

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]

SLEEP = "import time; time.sleep(600)"


def _quota(core: client.CoreV1Api, ns: str, hard: dict[str, str]) -> None:
    body = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="compute"), spec=client.V1ResourceQuotaSpec(hard=hard)
    )
    core.create_namespaced_resource_quota(ns, body)


def test_a_pod_over_quota_is_forbidden_with_the_real_message(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    _quota(core, ns, {"requests.cpu": "2"})
    core.create_namespaced_pod(ns, python_pod("first", SLEEP, cpu="1"))
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod(ns, python_pod("second", SLEEP, cpu="2"))
    assert raised.value.status == 403
    assert json.loads(raised.value.body)["message"] == (
        'pods "second" is forbidden: exceeded quota: compute, requested: requests.cpu=2, '
        "used: requests.cpu=1, limited: requests.cpu=2"
    )
    core.delete_namespaced_pod("first", ns, grace_period_seconds=0)


def test_quota_status_tracks_usage(emu: KubeEmulator, core: client.CoreV1Api, ns: str) -> None:
    _quota(core, ns, {"requests.cpu": "4", "pods": "10"})
    core.create_namespaced_pod(ns, python_pod("user", SLEEP, cpu="500m"))

    def used() -> dict[str, str]:
        return core.read_namespaced_resource_quota("compute", ns).status.used or {}

    assert emu.wait_for(lambda: used() == {"requests.cpu": "500m", "pods": "1"})
    core.delete_namespaced_pod("user", ns, grace_period_seconds=0)
    assert emu.wait_for(lambda: used() == {"requests.cpu": "0", "pods": "0"})


def test_a_job_blocked_by_quota_reports_failed_create_events(
    emu: KubeEmulator, batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    _quota(core, ns, {"pods": "0"})
    batch.create_namespaced_job(ns, python_job("blocked", "pass"))

    def failed_create() -> list[str]:
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=blocked").items
        return [e.message for e in events if e.reason == "FailedCreate"]

    message = emu.wait_for(failed_create)[0]
    assert message.startswith('Error creating: pods "blocked-')
    assert "exceeded quota: compute, requested: pods=1, used: pods=0, limited: pods=0" in message


def test_limit_range_defaults_fill_in_container_resources(core: client.CoreV1Api, ns: str) -> None:
    item = client.V1LimitRangeItem(
        type="Container", default={"memory": "512Mi"}, default_request={"cpu": "250m"}
    )
    core.create_namespaced_limit_range(
        ns,
        client.V1LimitRange(
            metadata=client.V1ObjectMeta(name="defaults"),
            spec=client.V1LimitRangeSpec(limits=[item]),
        ),
    )
    pod = core.create_namespaced_pod(ns, python_pod("defaulted", "pass"))
    resources = pod.spec.containers[0].resources
    assert resources.limits == {"memory": "512Mi"}
    assert resources.requests == {"cpu": "250m", "memory": "512Mi"}


def test_a_global_default_priority_class_resolves_the_pod_priority(
    emu: KubeEmulator, api: client.ApiClient, ns: str
) -> None:
    other = emu.tenant("team-b").api_client()
    client.SchedulingV1Api(other).create_priority_class(
        client.V1PriorityClass(
            metadata=client.V1ObjectMeta(name="normal"), value=50, global_default=True
        )
    )
    pod = client.CoreV1Api(other).create_namespaced_pod("default", python_pod("prio", "pass"))
    assert (pod.spec.priority_class_name, pod.spec.priority) == ("normal", 50)


def test_access_reviews_follow_the_permission_table(
    emu: KubeEmulator, api: client.ApiClient, batch: client.BatchV1Api, ns: str
) -> None:
    review_api = client.AuthorizationV1Api(api)

    def allowed(verb: str, resource: str) -> bool:
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    verb=verb, resource=resource, group="batch", namespace=ns
                )
            )
        )
        return bool(review_api.create_self_subject_access_review(review).status.allowed)

    assert allowed("create", "jobs")
    emu.set_permission("team-a", "create", "jobs", allowed=False)
    try:
        assert not allowed("create", "jobs") and allowed("list", "jobs")
        with pytest.raises(client.ApiException) as raised:
            batch.create_namespaced_job(ns, python_job("denied", "pass"))
        assert raised.value.status == 403
        message = json.loads(raised.value.body)["message"]
        assert 'cannot create resource "jobs" in API group "batch"' in message
    finally:
        emu.set_permission("team-a", "create", "jobs", allowed=True)
