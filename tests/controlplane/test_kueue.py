"""Real Kueue v0.17 on a tenant of the real control plane (`kueue_team_a`): Jobs labelled
`kueue.x-k8s.io/queue-name` are suspended on create and run once their Workload is admitted,
all pods or none; unlabelled Jobs never meet Kueue."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.controlplane.kueue import (
    GROUP,
    QUEUE_NAME_LABEL,
    VERSION,
    KueuePorts,
    kueue_configuration,
    webhook_configurations,
    with_conversion_webhook,
)
from tests.plane_fixtures import KueueQueues

# The tests on the real control plane are marked one by one (the first of them may build Kueue
# under CI); the ones on the manifests start nothing.

Obj = dict[str, Any]


class KueueTenant:
    """The tenant Kueue manages, as these tests use it."""

    def __init__(self, kube: RealKube, queues: KueueQueues) -> None:
        self.queues = queues
        self.namespace = queues.namespace
        self.wait_for = kube.wait_for
        self.api = kube.tenant(queues.tenant).api_client()
        self.batch = client.BatchV1Api(self.api)
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.created: list[str] = []

    def create_job(self, name: str, *, queued: bool = True, **pod: Any) -> Obj:
        """A Job of `python -c` pods (`_job`), labelled for the local queue when `queued`."""
        body = _job(name, self.queues.local_queue if queued else None, **pod)
        created = self.batch.create_namespaced_job(self.namespace, body)
        self.created.append(name)
        return dict(self.api.sanitize_for_serialization(created))

    def job(self, name: str) -> Obj:
        found = self.batch.read_namespaced_job(name, self.namespace)
        return dict(self.api.sanitize_for_serialization(found))

    def pods(self, job: str) -> list[Obj]:
        found = self.core.list_namespaced_pod(self.namespace, label_selector=f"job-name={job}")
        return list(self.api.sanitize_for_serialization(found.items))

    def workload(self, job_uid: str) -> Obj | None:
        """The Workload that the Job with `job_uid` owns, if any."""
        listed = self.custom.list_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "workloads"
        )
        for workload in listed["items"]:
            owners = workload["metadata"].get("ownerReferences", [])
            if any(owner["uid"] == job_uid for owner in owners):
                return dict(workload)
        return None

    def wait_workload(self, job_uid: str, **conditions: str) -> Obj:
        """The Job's Workload once each `type=status` of `conditions` holds."""

        def check() -> Obj | None:
            workload = self.workload(job_uid)
            if workload is None or not conditions.items() <= _conditions(workload).items():
                return None
            return workload

        return dict(self.wait_for(check, timeout=90, interval=0.5))

    def delete_job(self, name: str) -> None:
        """Delete the Job and its pods; its Workload goes with it and frees its quota."""
        self.batch.delete_namespaced_job(
            name, self.namespace, propagation_policy="Background", grace_period_seconds=0
        )
        self.created.remove(name)


@pytest.fixture
def kueue(kueue_team_a: KueueQueues, gang_plane: RealKube) -> Iterator[KueueTenant]:
    view = KueueTenant(gang_plane, kueue_team_a)
    yield view
    for name in list(view.created):
        view.delete_job(name)
    view.api.close()


def _job(
    name: str,
    queue: str | None,
    code: str = "print('ran')",
    gpus: int = 0,
    pods: int = 1,
    priority_class: str | None = None,
) -> Obj:
    resources = {"cpu": "100m", "memory": "64Mi"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    priority = {"priorityClassName": priority_class} if priority_class else {}
    return {
        "metadata": {"name": name, "labels": {QUEUE_NAME_LABEL: queue} if queue else {}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    **priority,
                    "containers": [
                        {
                            "name": "main",
                            "image": "k8s-ai-test:latest",
                            "command": [sys.executable, "-c", code],
                            "resources": {"requests": resources, "limits": resources},
                        }
                    ],
                }
            },
        },
    }


def _conditions(obj: Obj) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}


def _condition(obj: Obj, kind: str) -> Obj:
    return next(c for c in obj["status"]["conditions"] if c["type"] == kind)


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.mark.controlplane
@pytest.mark.kueue
@pytest.mark.timeout(2400)
def test_a_labelled_job_is_suspended_on_create_and_runs_once_its_workload_is_admitted(
    kueue: KueueTenant,
) -> None:
    name = _name("queued")
    job = kueue.create_job(name)
    assert job["spec"]["suspend"] is True  # Kueue's mutating webhook, on create
    workload = kueue.wait_workload(job["metadata"]["uid"], QuotaReserved="True", Admitted="True")
    print("admitted Workload:", json.dumps(workload, indent=1))
    (owner,) = workload["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", name, True)
    assert workload["spec"]["queueName"] == kueue.queues.local_queue
    assert workload["status"]["admission"]["clusterQueue"] == kueue.queues.cluster_queue
    done = kueue.wait_for(lambda: (j := kueue.job(name))["status"].get("succeeded") and j, 120)
    assert done["spec"]["suspend"] is False


@pytest.mark.controlplane
@pytest.mark.kueue
@pytest.mark.timeout(2400)
def test_a_job_beyond_the_remaining_quota_stays_suspended_with_no_pod_until_it_fits(
    kueue: KueueTenant,
) -> None:
    holder = kueue.create_job(_name("holder"), code="import time; time.sleep(600)", gpus=4)
    kueue.wait_workload(holder["metadata"]["uid"], Admitted="True")
    name = _name("gang")
    gang = kueue.create_job(name, gpus=3, pods=2)  # 6 GPUs, 4 of 8 left
    pending = kueue.wait_workload(gang["metadata"]["uid"], QuotaReserved="False")
    print("pending Workload:", json.dumps(pending, indent=1))
    message = _condition(pending, "QuotaReserved")["message"]
    assert "insufficient unused quota for nvidia.com/gpu in flavor default" in message
    assert kueue.job(name)["spec"]["suspend"] is True and kueue.pods(name) == []
    kueue.delete_job(holder["metadata"]["name"])
    kueue.wait_workload(gang["metadata"]["uid"], Admitted="True")
    assert kueue.wait_for(lambda: len(kueue.pods(name)) == 2, 60)  # both pods at once


@pytest.mark.controlplane
@pytest.mark.kueue
@pytest.mark.timeout(2400)
def test_an_unlabelled_job_runs_without_suspension_or_workload(kueue: KueueTenant) -> None:
    name = _name("plain")
    job = kueue.create_job(name, queued=False)
    assert not job["spec"]["suspend"]
    kueue.wait_for(lambda: kueue.job(name)["status"].get("succeeded"), 120)
    assert kueue.workload(job["metadata"]["uid"]) is None


@pytest.mark.controlplane
@pytest.mark.kueue
@pytest.mark.timeout(2400)
def test_a_preemptible_job_is_suspended_and_its_pods_deleted_when_an_urgent_job_needs_the_quota(
    kueue: KueueTenant,
) -> None:
    sleep = "import time; time.sleep(600)"
    low = kueue.create_job(
        _name("low"), code=sleep, gpus=4, pods=2, priority_class="k8s-ai-preemptible"
    )
    kueue.wait_workload(low["metadata"]["uid"], Admitted="True")
    low_name = low["metadata"]["name"]
    kueue.wait_for(lambda: len(kueue.pods(low_name)) == 2, 60)
    urgent = kueue.create_job(_name("urgent"), gpus=4, priority_class="urgent")
    evicted = kueue.wait_workload(low["metadata"]["uid"], Evicted="True", Preempted="True")
    print("preempted Workload conditions:", json.dumps(evicted["status"]["conditions"], indent=1))
    assert _condition(evicted, "Evicted")["reason"] == "Preempted"
    assert _condition(evicted, "Preempted")["reason"] == "InClusterQueue"
    assert kueue.wait_for(lambda: kueue.job(low_name)["spec"]["suspend"], 30)
    kueue.wait_for(lambda: kueue.pods(low_name) == [], 60)  # the Job controller deletes them
    kueue.wait_workload(urgent["metadata"]["uid"], Admitted="True")


_MANIFESTS = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: vclusterqueue.kb.io
  clientConfig:
    service:
      name: webhook-service
      namespace: system
      path: /validate-kueue-x-k8s-io-v1beta2-clusterqueue
  rules:
  - apiGroups: [kueue.x-k8s.io]
    apiVersions: [v1beta2]
    operations: [CREATE]
    resources: [clusterqueues]
"""


def test_only_the_job_and_kueue_webhooks_are_registered_the_job_ones_for_labelled_jobs() -> None:
    mutating, validating = webhook_configurations(_MANIFESTS, 9443)
    assert mutating["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    assert [w["name"] for w in mutating["webhooks"]] == ["mjob.kb.io"]
    (job,) = mutating["webhooks"]
    assert job["clientConfig"] == {
        "service": {
            "namespace": "kueue-system",
            "name": "kueue-webhook-service",
            "path": "/mutate-batch-v1-job",
            "port": 9443,
        }
    }
    exists = {"key": QUEUE_NAME_LABEL, "operator": "Exists"}
    assert job["objectSelector"] == {"matchExpressions": [exists]}
    (queue,) = validating["webhooks"]
    assert "objectSelector" not in queue and queue["clientConfig"]["service"]["port"] == 9443


def test_kueue_listens_on_loopback_and_manages_only_jobs_that_name_a_queue(tmp_path: Path) -> None:
    ports = KueuePorts(webhook=1, health=2, metrics=3)
    configuration = kueue_configuration(ports, tmp_path)
    assert configuration["webhook"] == {"host": "127.0.0.1", "port": 1, "certDir": str(tmp_path)}
    assert configuration["health"] == {"healthProbeBindAddress": "127.0.0.1:2"}
    assert configuration["manageJobsWithoutQueueName"] is False
    assert configuration["integrations"] == {"frameworks": ["batch/job"]}
    assert configuration["featureGates"] == {"VisibilityOnDemand": False}
    assert "waitForPodsReady" not in configuration
    with_timeout = kueue_configuration(ports, tmp_path, wait_for_pods_ready_s=30)
    assert with_timeout["waitForPodsReady"] == {"timeout": "30s"}
    assert yaml.safe_load(yaml.safe_dump(with_timeout)) == with_timeout


def test_the_two_version_crds_convert_through_kueues_webhook() -> None:
    def crd(plural: str) -> dict[str, Any]:
        return {"metadata": {"name": f"{plural}.{GROUP}"}, "spec": {"names": {"plural": plural}}}

    converted = with_conversion_webhook(crd("workloads"), 9443)["spec"]["conversion"]
    assert converted["strategy"] == "Webhook"
    assert converted["webhook"]["clientConfig"]["service"]["path"] == "/convert"
    assert "conversion" not in with_conversion_webhook(crd("resourceflavors"), 9443)["spec"]
