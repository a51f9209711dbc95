"""The Job controller: conditions as Kubernetes >= 1.31 sets them, policies and limits."""

from __future__ import annotations

import pytest
from emu_support import condition, python_job
from kubernetes import client

from k8s_ai_orchestrator.testing.kube import KubeEmulator

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(90)]

SLEEP = "import time; time.sleep(600)"


def _job(batch: client.BatchV1Api, ns: str, name: str) -> client.V1Job:
    return batch.read_namespaced_job_status(name, ns)


def _finished(batch: client.BatchV1Api, ns: str, name: str) -> str | None:
    job = _job(batch, ns, name)
    for type_ in ("Complete", "Failed"):
        found = condition(job, type_) if job.status.conditions else None
        if found is not None and found.status == "True":
            return type_
    return None


def _job_pods(core: client.CoreV1Api, ns: str, job: str) -> list[client.V1Pod]:
    return core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items


def test_a_successful_job_gets_success_criteria_met_then_complete(
    emu: KubeEmulator, batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    batch.create_namespaced_job(ns, python_job("ok", "print('done')", completions=2, parallelism=2))
    assert emu.wait_for(lambda: _finished(batch, ns, "ok")) == "Complete"
    job = _job(batch, ns, "ok")
    assert [c.type for c in job.status.conditions] == ["SuccessCriteriaMet", "Complete"]
    assert job.status.succeeded == 2 and not job.status.active and not job.status.failed
    assert job.status.start_time and job.status.completion_time
    pod = _job_pods(core, ns, "ok")[0]
    labels = pod.metadata.labels
    assert labels["batch.kubernetes.io/job-name"] == "ok" and labels["job-name"] == "ok"
    assert labels["controller-uid"] == job.metadata.uid
    assert pod.metadata.owner_references[0].uid == job.metadata.uid
    assert not pod.metadata.finalizers  # counted: the tracking finalizer is gone


def test_backoff_limit_exceeded_fails_the_job(emu, batch, ns: str) -> None:
    batch.create_namespaced_job(ns, python_job("bad", "raise SystemExit(2)", backoff_limit=1))
    assert emu.wait_for(lambda: _finished(batch, ns, "bad")) == "Failed"
    job = _job(batch, ns, "bad")
    assert [c.type for c in job.status.conditions] == ["FailureTarget", "Failed"]
    assert condition(job, "Failed").reason == "BackoffLimitExceeded"
    assert job.status.failed == 2


def test_pod_failure_policy_fail_job_on_an_exit_code(emu, batch, ns: str) -> None:
    policy = client.V1PodFailurePolicy(
        rules=[
            client.V1PodFailurePolicyRule(
                action="FailJob",
                on_exit_codes=client.V1PodFailurePolicyOnExitCodesRequirement(
                    operator="In", values=[42]
                ),
            )
        ]
    )
    job = python_job("fatal", "raise SystemExit(42)", backoff_limit=6, pod_failure_policy=policy)
    batch.create_namespaced_job(ns, job)
    assert emu.wait_for(lambda: _finished(batch, ns, "fatal")) == "Failed"
    failed = condition(_job(batch, ns, "fatal"), "Failed")
    assert failed.reason == "PodFailurePolicy"
    assert failed.message.startswith("Container main for pod ")
    assert failed.message.endswith("failed with exit code 42 matching FailJob rule at index 0")


def test_an_evicted_pod_is_ignored_by_a_disruption_target_rule_and_replaced(
    emu: KubeEmulator, batch, core, ns: str
) -> None:
    policy = client.V1PodFailurePolicy(
        rules=[
            client.V1PodFailurePolicyRule(
                action="Ignore",
                on_pod_conditions=[
                    client.V1PodFailurePolicyOnPodConditionsPattern(
                        type="DisruptionTarget", status="True"
                    )
                ],
            )
        ]
    )
    job = python_job("resilient", SLEEP, backoff_limit=0, pod_failure_policy=policy)
    batch.create_namespaced_job(ns, job)
    first = emu.wait_for(
        lambda: [p for p in _job_pods(core, ns, "resilient") if p.status.phase == "Running"]
    )[0]
    emu.evict_pod("team-a", ns, first.metadata.name)

    def replacement() -> list[client.V1Pod]:
        return [
            p
            for p in _job_pods(core, ns, "resilient")
            if p.metadata.name != first.metadata.name and p.status.phase == "Running"
        ]

    emu.wait_for(replacement, timeout=40)
    job_now = _job(batch, ns, "resilient")
    assert not job_now.status.failed and _finished(batch, ns, "resilient") is None
    batch.delete_namespaced_job("resilient", ns, propagation_policy="Background")


def test_with_a_fail_job_rule_on_disruption_an_evicted_pod_is_not_replaced(
    emu: KubeEmulator, batch, core, ns: str
) -> None:
    rule = client.V1PodFailurePolicyRule(
        action="FailJob",
        on_pod_conditions=[
            client.V1PodFailurePolicyOnPodConditionsPattern(type="DisruptionTarget")
        ],
    )
    job = python_job(
        "no-retry",
        SLEEP,
        backoff_limit=0,
        pod_failure_policy=client.V1PodFailurePolicy(rules=[rule]),
    )
    created = batch.create_namespaced_job(ns, job)
    assert created.spec.pod_replacement_policy == "Failed"
    first = emu.wait_for(
        lambda: [p for p in _job_pods(core, ns, "no-retry") if p.status.phase == "Running"]
    )[0]
    emu.evict_pod("team-a", ns, first.metadata.name)
    assert emu.wait_for(lambda: _finished(batch, ns, "no-retry")) == "Failed"
    failed = condition(_job(batch, ns, "no-retry"), "Failed")
    assert failed.reason == "PodFailurePolicy"
    assert "has condition DisruptionTarget matching FailJob rule at index 0" in failed.message
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=no-retry").items
    assert sum(e.count for e in events if e.reason == "SuccessfulCreate") == 1


def test_indexed_jobs_set_the_completion_index(emu, batch, core, ns: str) -> None:
    code = "import os; print('index', os.environ['JOB_COMPLETION_INDEX'])"
    job = python_job("indexed", code, completions=3, parallelism=3, completion_mode="Indexed")
    batch.create_namespaced_job(ns, job)
    assert emu.wait_for(lambda: _finished(batch, ns, "indexed")) == "Complete"
    assert _job(batch, ns, "indexed").status.completed_indexes == "0-2"
    annotations = {
        p.metadata.annotations["batch.kubernetes.io/job-completion-index"]
        for p in _job_pods(core, ns, "indexed")
    }
    assert annotations == {"0", "1", "2"}


def test_active_deadline_seconds_fails_with_deadline_exceeded(emu, batch, core, ns: str) -> None:
    batch.create_namespaced_job(ns, python_job("slow", SLEEP, active_deadline_seconds=1))
    assert emu.wait_for(lambda: _finished(batch, ns, "slow"), timeout=40) == "Failed"
    assert condition(_job(batch, ns, "slow"), "Failed").reason == "DeadlineExceeded"
    emu.wait_for(lambda: all(p.status.phase == "Failed" for p in _job_pods(core, ns, "slow")))


def test_a_suspended_job_creates_no_pods_until_resumed(emu, batch, core, ns: str) -> None:
    batch.create_namespaced_job(ns, python_job("later", "pass", suspend=True))
    emu.wait_for(
        lambda: (
            condition(_job(batch, ns, "later"), "Suspended")
            if _job(batch, ns, "later").status.conditions
            else None
        )
    )
    assert _job_pods(core, ns, "later") == []
    batch.patch_namespaced_job("later", ns, {"spec": {"suspend": False}})
    assert emu.wait_for(lambda: _finished(batch, ns, "later")) == "Complete"


def test_ttl_after_finished_deletes_the_job(emu, batch, ns: str) -> None:
    batch.create_namespaced_job(ns, python_job("brief", "pass", ttl_seconds_after_finished=0))
    emu.wait_for(lambda: not batch.list_namespaced_job(ns).items, timeout=40)
