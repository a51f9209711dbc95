"""Behaviour contract shared by the emulator and real clusters (this repository's tests only).

Each check takes a `ContractTarget` (an API client, a namespace to work in, and how to run
Python in a container) and asserts what the Kubernetes backend relies on. The same checks run
against the emulator and the real control plane in the test suite, and against any cluster
when `KUBECONFIG` and `K8S_AI_CONTRACT=1` are set, which is how the emulator's fidelity is
kept honest. `API_CHECKS` (`contract_api.py`) need only an API server; `HISTORY_CHECKS` a
server whose oldest history is compacted; `NODE_CHECKS` (here) a node that runs containers.

Example:
    >>> [check.__name__ for check in NODE_CHECKS][:2]
    ['check_pod_runs_and_logs', 'check_objects_deserialize_strictly']
    >>> set(CHECKS) == set(API_CHECKS) | set(HISTORY_CHECKS) | set(NODE_CHECKS)
    True
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from kubernetes import client

from tests.contract_support.contract_api import API_CHECKS, HISTORY_CHECKS
from tests.contract_support.contract_target import ContractTarget, assert_strict, raw_get

__all__ = [
    "API_CHECKS",
    "CHECKS",
    "HISTORY_CHECKS",
    "NODE_CHECKS",
    "ContractTarget",
    "assert_strict",
]


def _phase(target: ContractTarget, name: str) -> str:
    return str(target.core().read_namespaced_pod(name, target.namespace).status.phase)


def _terminated(pod: client.V1Pod) -> Any:
    return pod.status.container_statuses[0].state.terminated


def check_pod_runs_and_logs(target: ContractTarget) -> None:
    """A pod runs its command to Succeeded; the log holds its output; exit 0 is Completed."""
    core, ns = target.core(), target.namespace
    core.create_namespaced_pod(ns, target.pod("contract-hello", "print('hello contract')"))
    target.wait(lambda: _phase(target, "contract-hello") in ("Succeeded", "Failed"))
    pod = core.read_namespaced_pod("contract-hello", ns)
    assert pod.status.phase == "Succeeded"
    assert (_terminated(pod).exit_code, _terminated(pod).reason) == (0, "Completed")
    log = core.read_namespaced_pod_log("contract-hello", ns, _preload_content=False)
    assert log.data.decode() == "hello contract\n"


def check_objects_deserialize_strictly(target: ContractTarget) -> None:
    """Pods, jobs, events and lists carry only fields the client's models declare."""
    core, ns = target.core(), target.namespace
    core.create_namespaced_pod(ns, target.pod("contract-strict", "print(1)"))
    target.batch().create_namespaced_job(ns, target.job("contract-strict-job", "print(2)"))
    target.wait(lambda: _phase(target, "contract-strict") in ("Succeeded", "Failed"))
    api = target.api_client
    assert_strict(api, raw_get(target, f"/api/v1/namespaces/{ns}/pods/contract-strict"), "V1Pod")
    assert_strict(api, raw_get(target, f"/api/v1/namespaces/{ns}/pods"), "V1PodList")
    assert_strict(api, raw_get(target, f"/api/v1/namespaces/{ns}/events"), "CoreV1EventList")
    jobs = f"/apis/batch/v1/namespaces/{ns}/jobs"
    assert_strict(api, raw_get(target, f"{jobs}/contract-strict-job"), "V1Job")
    assert_strict(api, raw_get(target, f"/api/v1/namespaces/{ns}"), "V1Namespace")


def _conditions(job: client.V1Job) -> list[tuple[str, str | None]]:
    return [(c.type, c.reason) for c in job.status.conditions or [] if c.status == "True"]


def _finished(target: ContractTarget, name: str) -> client.V1Job | None:
    job = target.batch().read_namespaced_job_status(name, target.namespace)
    types = {c for c, _ in _conditions(job)}
    return job if types & {"Complete", "Failed"} else None


def check_job_success_conditions(target: ContractTarget) -> None:
    """A Job that succeeds gets SuccessCriteriaMet, then Complete; its pods are labelled."""
    target.batch().create_namespaced_job(target.namespace, target.job("contract-ok", "print('ok')"))
    job = target.wait(lambda: _finished(target, "contract-ok"))
    assert [c for c, _ in _conditions(job)] == ["SuccessCriteriaMet", "Complete"]
    assert job.status.succeeded == 1 and job.status.completion_time is not None
    pods = target.core().list_namespaced_pod(
        target.namespace, label_selector="job-name=contract-ok"
    )
    labels = pods.items[0].metadata.labels
    assert labels["batch.kubernetes.io/job-name"] == "contract-ok"
    assert labels["controller-uid"] == job.metadata.uid


def check_job_pod_failure_policy(target: ContractTarget) -> None:
    """A FailJob rule on exit code 42 fails the Job with FailureTarget, then Failed."""
    rule = client.V1PodFailurePolicyRule(
        action="FailJob",
        on_exit_codes=client.V1PodFailurePolicyOnExitCodesRequirement(operator="In", values=[42]),
    )
    body = target.job(
        "contract-fatal",
        "raise SystemExit(42)",
        backoff_limit=3,
        pod_failure_policy=client.V1PodFailurePolicy(rules=[rule]),
    )
    target.batch().create_namespaced_job(target.namespace, body)
    job = target.wait(lambda: _finished(target, "contract-fatal"))
    assert [c for c, _ in _conditions(job)] == ["FailureTarget", "Failed"]
    assert dict(_conditions(job))["Failed"] == "PodFailurePolicy"


def check_oom_kill(target: ContractTarget) -> None:
    """A container growing past a 256Mi limit is OOMKilled with exit code 137."""
    grow = "chunks = []\nwhile True:\n    chunks.append(b'x' * (16 * 1024 * 1024))\n"
    target.core().create_namespaced_pod(target.namespace, target.pod("contract-oom", grow, "256Mi"))
    target.wait(lambda: _phase(target, "contract-oom") == "Failed")
    state = _terminated(target.core().read_namespaced_pod("contract-oom", target.namespace))
    assert (state.reason, state.exit_code) == ("OOMKilled", 137)


def check_unschedulable_pod_is_explained(target: ContractTarget) -> None:
    """A pod asking for 10000 CPUs stays Pending with a FailedScheduling 'Insufficient cpu'."""
    core, ns = target.core(), target.namespace
    pod = target.pod("contract-huge", "pass")
    pod.spec.containers[0].resources = client.V1ResourceRequirements(requests={"cpu": "10000"})
    core.create_namespaced_pod(ns, pod)

    def explained() -> list[str]:
        events = core.list_namespaced_event(ns, field_selector="involvedObject.name=contract-huge")
        return [e.message for e in events.items if e.reason == "FailedScheduling"]

    message = target.wait(explained)[0]
    assert message.startswith("0/") and "Insufficient cpu" in message
    assert _phase(target, "contract-huge") == "Pending"
    core.delete_namespaced_pod("contract-huge", ns, grace_period_seconds=0)


def check_indexed_job_pods_know_their_index(target: ContractTarget) -> None:
    """An Indexed Job's pods carry their completion index (annotation, label, env) and are
    named by the controller (`<job>-<index>-<suffix>`) whatever name the template has."""
    code = "import os; print('index', os.environ['JOB_COMPLETION_INDEX'])"
    body = target.job(
        "contract-indexed", code, completion_mode="Indexed", completions=2, parallelism=2
    )
    body.spec.template.metadata = client.V1ObjectMeta(name="ignored")  # as dagster-k8s sets
    target.batch().create_namespaced_job(target.namespace, body)
    job = target.wait(lambda: _finished(target, "contract-indexed"))
    assert job.status.completed_indexes == "0,1" and job.status.succeeded == 2
    pods = target.core().list_namespaced_pod(
        target.namespace, label_selector="job-name=contract-indexed"
    )
    key = "batch.kubernetes.io/job-completion-index"
    for pod in pods.items:
        index = pod.metadata.annotations[key]
        assert pod.metadata.labels[key] == index
        assert pod.metadata.name.startswith(f"contract-indexed-{index}-")
        log = target.core().read_namespaced_pod_log(
            pod.metadata.name, target.namespace, _preload_content=False
        )
        assert log.data.decode() == f"index {index}\n"


def check_required_pod_anti_affinity(target: ContractTarget) -> None:
    """Pods with required anti-affinity on kubernetes.io/hostname take one node each; the
    first that finds no free node stays Pending with "didn't match pod anti-affinity rules"."""
    core, ns = target.core(), target.namespace
    term = client.V1PodAffinityTerm(
        label_selector=client.V1LabelSelector(match_labels={"contract": "spread"}),
        topology_key="kubernetes.io/hostname",
    )
    affinity = client.V1Affinity(
        pod_anti_affinity=client.V1PodAntiAffinity(
            required_during_scheduling_ignored_during_execution=[term]
        )
    )

    def placed_or_refused(name: str) -> tuple[str | None, str | None] | None:
        node = core.read_namespaced_pod(name, ns).spec.node_name
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}")
        refused = [e.message for e in events.items if e.reason == "FailedScheduling"]
        return (node, None) if node else ((None, refused[0]) if refused else None)

    bound: list[str] = []
    for index in range(20):
        name = f"contract-spread-{index}"
        pod = target.pod(name, "import time; time.sleep(600)")
        pod.metadata.labels = {"contract": "spread"}
        pod.spec.affinity = affinity
        core.create_namespaced_pod(ns, pod)
        node, refusal = target.wait(functools.partial(placed_or_refused, name))
        if node is None:
            break
        bound.append(node)
    assert bound and len(set(bound)) == len(bound), bound
    assert "didn't match pod anti-affinity rules" in str(refusal), refusal
    for created in range(index + 1):
        core.delete_namespaced_pod(f"contract-spread-{created}", ns, grace_period_seconds=0)


def _resize_memory(target: ContractTarget, name: str, memory: str) -> client.V1Pod:
    """Resize the pod's container `main` to `memory` (request and limit) in place."""
    body = {
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "resources": {"requests": {"memory": memory}, "limits": {"memory": memory}},
                }
            ]
        }
    }
    return target.core().patch_namespaced_pod_resize(name, target.namespace, body)


def _running_with_resources(target: ContractTarget, name: str) -> client.V1Pod | None:
    pod = target.core().read_namespaced_pod(name, target.namespace)
    statuses = pod.status.container_statuses or []
    return pod if statuses and statuses[0].state.running and statuses[0].resources else None


def check_pod_resize_in_place(target: ContractTarget) -> None:
    """A running pod resized from 128Mi to 512Mi through `pods/resize` keeps running (same
    UID, no restart), reports the new limit in `containerStatuses[].resources`, and may then
    use more than its old limit."""
    code = (
        "import os, time\n"
        "time.sleep(float(os.environ.get('WAIT', '0')))\n"
        "chunk = b'x' * (300 * 1024 * 1024)\n"
        "print('grown', len(chunk) // 2**20, flush=True)\n"
    )
    pod = target.pod("contract-resize", code, "128Mi")
    pod.spec.containers[0].env = [client.V1EnvVar(name="WAIT", value="12")]
    created = target.core().create_namespaced_pod(target.namespace, pod)
    target.wait(lambda: _running_with_resources(target, "contract-resize"))
    answer = _resize_memory(target, "contract-resize", "512Mi")
    assert answer.spec.containers[0].resources.limits == {"memory": "512Mi"}
    assert answer.metadata.generation == (created.metadata.generation or 1) + 1

    def applied() -> client.V1Pod | None:
        pod = target.core().read_namespaced_pod("contract-resize", target.namespace)
        status = (pod.status.container_statuses or [None])[0]
        limits = (status.resources.limits or {}) if status and status.resources else {}
        return pod if limits.get("memory") == "512Mi" else None

    target.wait(applied)
    target.wait(lambda: _phase(target, "contract-resize") in ("Succeeded", "Failed"))
    done = target.core().read_namespaced_pod("contract-resize", target.namespace)
    assert done.metadata.uid == created.metadata.uid
    assert done.status.phase == "Succeeded", done.status.container_statuses
    assert done.status.container_statuses[0].restart_count == 0
    log = target.core().read_namespaced_pod_log(
        "contract-resize", target.namespace, _preload_content=False
    )
    assert log.data.decode() == "grown 300\n"


def check_pod_resize_is_deferred_without_room(target: ContractTarget) -> None:
    """A resize past the node's allocatable is refused at once (403, cause NodeCapacity); one
    the node could hold but not now waits: `PodResizePending` (reason Deferred, "Node didn't
    have enough resource: memory, ...") and a `ResizeDeferred` warning ("Pod resize OutOfmemory:
    {...}", the kubelet's admission reason), the old limit kept.
    Changing a GPU amount through `pods/resize` is refused (422)."""
    core, ns = target.core(), target.namespace
    sleeper = "import time; time.sleep(3600)"  # outlives the check, which deletes it
    core.create_namespaced_pod(ns, target.pod("contract-deferred", sleeper, "128Mi"))
    pod = target.wait(lambda: _running_with_resources(target, "contract-deferred"))
    node = core.read_node(pod.spec.node_name)
    try:
        _resize_memory(target, "contract-deferred", "64Ti")
    except client.ApiException as error:
        assert error.status == 403, error.body
        assert "node didn't have enough allocatable resources: memory" in error.body
        assert json.loads(error.body)["details"]["causes"] == [{"reason": "NodeCapacity"}]
    else:
        raise AssertionError("a resize past the node's allocatable was accepted")
    filler = target.pod("contract-filler", sleeper, "128Mi")
    filler.spec.node_name = pod.spec.node_name
    core.create_namespaced_pod(ns, filler)
    target.wait(lambda: _phase(target, "contract-filler") == "Running")
    _resize_memory(target, "contract-deferred", node.status.allocatable["memory"])

    def pending() -> client.V1PodCondition | None:
        pod = core.read_namespaced_pod("contract-deferred", ns)
        found = [c for c in pod.status.conditions or [] if c.type == "PodResizePending"]
        return found[0] if found else None

    condition = target.wait(pending)
    assert (condition.status, condition.reason) == ("True", "Deferred")
    assert condition.message.startswith("Node didn't have enough resource: memory, requested: ")
    pod = core.read_namespaced_pod("contract-deferred", ns)
    assert pod.status.container_statuses[0].resources.limits == {"memory": "128Mi"}

    def warned() -> list[str]:
        selector = "involvedObject.name=contract-deferred"
        events = core.list_namespaced_event(ns, field_selector=selector)
        return [e.message for e in events.items if e.reason == "ResizeDeferred"]

    assert target.wait(warned)[0].startswith("Pod resize OutOfmemory: {")
    gpus = {"nvidia.com/gpu": "1"}
    body = {"spec": {"containers": [{"name": "main", "resources": {"limits": gpus}}]}}
    try:
        core.patch_namespaced_pod_resize("contract-deferred", ns, body)
    except client.ApiException as error:
        assert error.status == 422
        assert "only cpu and memory resources are mutable" in error.body
    else:
        raise AssertionError("a GPU amount was changed through pods/resize")
    for name in ("contract-deferred", "contract-filler"):
        core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    # gone before the next check: a node shared with other targets (the tenants of one plane)
    # must not still hold a pod the size of its allocatable
    target.wait(lambda: not core.list_namespaced_pod(ns).items)


Check = Callable[[ContractTarget], None]

NODE_CHECKS: tuple[Check, ...] = (
    check_pod_runs_and_logs,
    check_objects_deserialize_strictly,
    check_job_success_conditions,
    check_job_pod_failure_policy,
    check_oom_kill,
    check_unschedulable_pod_is_explained,
    check_indexed_job_pods_know_their_index,
    check_required_pod_anti_affinity,
    check_pod_resize_in_place,
    check_pod_resize_is_deferred_without_room,
)
"""Checks that need a node running containers (a kubelet, or the emulator's)."""

CHECKS: tuple[Check, ...] = (*API_CHECKS, *HISTORY_CHECKS, *NODE_CHECKS)
"""Every check: the API checks first (quick), then those that run containers."""
