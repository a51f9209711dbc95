"""Scheduling: requests, selectors, taints, the FailedScheduling message, and preemption."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from emu_support import condition, python_pod
from kubernetes import client, watch

from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(90)]

SLEEP = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *args: sys.exit(0))\n"
    "time.sleep(600)\n"
)
GPU_TAINT = {"key": "gpu", "value": "true", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def emu() -> Iterator[KubeEmulator]:
    nodes = [
        NodeSpec("node-a", cpu="2", memory="4Gi"),
        NodeSpec("node-b", cpu="2", memory="4Gi", labels={"disk": "ssd"}),
        NodeSpec("node-gpu", cpu="8", memory="32Gi", gpus=2, taints=(GPU_TAINT,)),
    ]
    with KubeEmulator(nodes=nodes, tenants=["team-a", "team-b"]) as emulator:
        yield emulator
        assert not emulator.controller_errors, emulator.controller_errors[0]


def _failed_scheduling(core: client.CoreV1Api, ns: str, pod: str) -> list[str]:
    events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={pod}").items
    return [event.message for event in events if event.reason == "FailedScheduling"]


def test_a_pod_too_big_for_every_node_stays_pending_with_the_real_message(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(ns, python_pod("huge", "pass", cpu="100"))
    emu.wait_for(lambda: _failed_scheduling(core, ns, "huge"))
    pod = core.read_namespaced_pod("huge", ns)
    scheduled = condition(pod, "PodScheduled")
    assert pod.status.phase == "Pending"
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")
    expected = (
        "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: true}, "
        "2 Insufficient cpu. preemption: 0/3 nodes are available: "
        "1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )
    assert scheduled.message == expected
    assert _failed_scheduling(core, ns, "huge") == [expected]


def test_node_selector_and_tolerations_choose_the_node(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    ssd = python_pod("on-ssd", "pass", node_selector={"disk": "ssd"})
    gpu = python_pod(
        "on-gpu", "pass", tolerations=[client.V1Toleration(key="gpu", operator="Exists")]
    )
    gpu.spec.containers[0].resources = client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"})
    core.create_namespaced_pod(ns, ssd)
    core.create_namespaced_pod(ns, gpu)
    emu.wait_for(
        lambda: all(core.read_namespaced_pod(n, ns).spec.node_name for n in ("on-ssd", "on-gpu"))
    )
    assert core.read_namespaced_pod("on-ssd", ns).spec.node_name == "node-b"
    assert core.read_namespaced_pod("on-gpu", ns).spec.node_name == "node-gpu"


def test_a_gpu_pod_without_toleration_is_explained(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    pod = python_pod("gpu-untolerated", "pass")
    pod.spec.containers[0].resources = client.V1ResourceRequirements(limits={"nvidia.com/gpu": "1"})
    core.create_namespaced_pod(ns, pod)
    messages = emu.wait_for(lambda: _failed_scheduling(core, ns, "gpu-untolerated"))
    assert messages[0].startswith(
        "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: true}, "
        "2 Insufficient nvidia.com/gpu."
    )


def test_a_higher_priority_pod_preempts_a_lower_priority_one(
    emu: KubeEmulator, api: client.ApiClient, core: client.CoreV1Api, ns: str
) -> None:
    scheduling = client.SchedulingV1Api(api)
    for name, value in (("low", 100), ("high", 1000)):
        scheduling.create_priority_class(
            client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value)
        )
    start = core.list_namespaced_pod(ns).metadata.resource_version
    pinned = {"kubernetes.io/hostname": "node-a"}
    core.create_namespaced_pod(
        ns, python_pod("victim", SLEEP, cpu="2", priority_class_name="low", node_selector=pinned)
    )
    emu.wait_for(lambda: core.read_namespaced_pod("victim", ns).status.phase == "Running")
    core.create_namespaced_pod(
        ns, python_pod("vip", SLEEP, cpu="2", priority_class_name="high", node_selector=pinned)
    )
    emu.wait_for(lambda: core.read_namespaced_pod("vip", ns).status.phase == "Running", timeout=40)
    assert core.read_namespaced_pod("vip", ns).spec.priority == 1000
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        ns,
        resource_version=start,
        field_selector="metadata.name=victim",
        timeout_seconds=1,
    )
    disruptions = [
        condition(e["object"], "DisruptionTarget") for e in stream if e["object"].status.conditions
    ]
    reasons = {c.reason for c in disruptions if c is not None}
    assert reasons == {"PreemptionByScheduler"}
    core.delete_namespaced_pod("vip", ns, grace_period_seconds=0)


def test_an_unknown_priority_class_is_forbidden(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(client.ApiException) as raised:
        core.create_namespaced_pod(ns, python_pod("p", "pass", priority_class_name="nope"))
    assert raised.value.status == 403
    assert "no PriorityClass with name nope was found" in raised.value.body


def test_pods_of_all_tenants_compete_for_the_shared_nodes(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    other = client.CoreV1Api(emu.tenant("team-b").api_client())
    pinned = {"kubernetes.io/hostname": "node-b"}
    other.create_namespaced_pod(
        "default", python_pod("b-hog", SLEEP, cpu="2", node_selector=pinned)
    )
    emu.wait_for(lambda: other.read_namespaced_pod("b-hog", "default").spec.node_name == "node-b")
    core.create_namespaced_pod(ns, python_pod("a-wants", "pass", cpu="1", node_selector=pinned))
    messages = emu.wait_for(lambda: _failed_scheduling(core, ns, "a-wants"))
    assert "Insufficient cpu" in messages[0]
    other.delete_namespaced_pod("b-hog", "default")
    emu.wait_for(lambda: core.read_namespaced_pod("a-wants", ns).spec.node_name == "node-b")
