"""Deletion and disruption: the Eviction API, Foreground propagation, namespace teardown."""

from __future__ import annotations

import pytest
from emu_support import condition, log_contains, python_job, python_pod
from kubernetes import client, watch

from k8s_ai_orchestrator.testing.kube import KubeEmulator

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(90)]

SLEEP = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *args: sys.exit(143))\n"
    "print('up', flush=True)\n"
    "time.sleep(600)\n"
)

SLOW_EXIT = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *args: (time.sleep(1), sys.exit(143)))\n"
    "print('up', flush=True)\n"
    "time.sleep(600)\n"
)


def _wait_until_up(emu: KubeEmulator, core: client.CoreV1Api, ns: str, job: str) -> None:
    """Wait until the job's pod has installed its SIGTERM handler (it prints 'up')."""

    def up() -> bool:
        pods = core.list_namespaced_pod(ns, label_selector=f"job-name={job}").items
        return bool(pods) and log_contains(core, pods[0].metadata.name, ns, "up")

    emu.wait_for(up)


def _running(core: client.CoreV1Api, ns: str, name: str) -> bool:
    return bool(core.read_namespaced_pod(name, ns).status.phase == "Running")


def test_the_eviction_api_marks_the_pod_and_terminates_it(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(ns, python_pod("evictee", SLEEP))
    emu.wait_for(lambda: _running(core, ns, "evictee"))
    start = core.list_namespaced_pod(ns).metadata.resource_version
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="evictee", namespace=ns))
    core.create_namespaced_pod_eviction("evictee", ns, eviction)
    emu.wait_for(lambda: not core.list_namespaced_pod(ns).items)
    stream = watch.Watch().stream(
        core.list_namespaced_pod, ns, resource_version=start, timeout_seconds=1
    )
    last = [event["object"] for event in stream][-1]
    assert condition(last, "DisruptionTarget").reason == "EvictionByEvictionAPI"
    assert (last.status.phase, last.status.reason) == ("Failed", "Evicted")


def test_an_evicted_job_pod_counts_as_a_failure_of_the_job(
    emu: KubeEmulator, batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    batch.create_namespaced_job(ns, python_job("counted", SLEEP, backoff_limit=0))
    running = emu.wait_for(
        lambda: [p for p in core.list_namespaced_pod(ns).items if p.status.phase == "Running"]
    )
    emu.evict_pod("team-a", ns, running[0].metadata.name)
    emu.wait_for(lambda: condition(batch.read_namespaced_job_status("counted", ns), "Failed"))
    job = batch.read_namespaced_job_status("counted", ns)
    # the evicted pod, and the replacement created while it terminated (deleted on failure)
    assert job.status.failed >= 1
    assert condition(job, "Failed").reason == "BackoffLimitExceeded"
    emu.wait_for(lambda: not core.list_namespaced_pod(ns).items)  # released once counted


def test_foreground_deletion_keeps_the_job_until_its_pods_are_gone(
    emu: KubeEmulator, batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    batch.create_namespaced_job(ns, python_job("fg", SLOW_EXIT))
    _wait_until_up(emu, core, ns, "fg")
    batch.delete_namespaced_job("fg", ns, propagation_policy="Foreground")
    pending = batch.read_namespaced_job("fg", ns)
    assert pending.metadata.deletion_timestamp is not None
    assert "foregroundDeletion" in pending.metadata.finalizers
    emu.wait_for(lambda: not batch.list_namespaced_job(ns).items)
    assert core.list_namespaced_pod(ns).items == []


def test_deleting_a_namespace_removes_everything_in_it(
    emu: KubeEmulator, core: client.CoreV1Api, batch: client.BatchV1Api
) -> None:
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="doomed")))
    batch.create_namespaced_job("doomed", python_job("inside", SLOW_EXIT))
    _wait_until_up(emu, core, "doomed", "inside")
    alive = emu.processes_alive()
    core.delete_namespace("doomed")
    assert core.read_namespace("doomed").status.phase == "Terminating"
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_config_map(
            "doomed", client.V1ConfigMap(metadata=client.V1ObjectMeta(name="late"))
        )
    assert raised.value.status == 403
    emu.wait_for(lambda: "doomed" not in [n.metadata.name for n in core.list_namespace().items])
    assert emu.processes_alive() == alive - 1


def test_preempt_pod_marks_the_pod_as_preempted_before_terminating_it(
    emu: KubeEmulator, batch: client.BatchV1Api, core: client.CoreV1Api, ns: str
) -> None:
    batch.create_namespaced_job(ns, python_job("spot", SLEEP, backoff_limit=0))
    running = emu.wait_for(
        lambda: [p for p in core.list_namespaced_pod(ns).items if p.status.phase == "Running"]
    )
    name = running[0].metadata.name
    start = core.list_namespaced_pod(ns).metadata.resource_version
    emu.preempt_pod("team-a", ns, name)
    emu.wait_for(
        lambda: not core.list_namespaced_pod(ns, field_selector=f"metadata.name={name}").items
    )
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        ns,
        resource_version=start,
        field_selector=f"metadata.name={name}",
        timeout_seconds=1,
    )
    last = [event["object"] for event in stream][-1]
    assert condition(last, "DisruptionTarget").reason == "PreemptionByScheduler"
    assert last.status.phase == "Failed"
    assert last.status.container_statuses[0].state.terminated.exit_code == 143
    reasons = {e.reason for e in core.list_namespaced_event(ns).items}
    assert {"Preempted", "Killing"} <= reasons
