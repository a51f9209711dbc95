"""Pre-flight and gang admission on a tenant whose host autoscales: a step no node holds now
is refused only when no declared node pool could create a node for it (`node_pools`,
autoscaling.py); the guard creates a gang whose missing nodes a pool can create; a partial
gang gets `provisioning_timeout_s` more while its nodes are being provisioned.

The tenant's API is the emulator's (one 8 CPU / 16Gi node, or none); the pools are declared.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import CoreV1Api, SchedulingV1Api

from k8s_ai_orchestrator.backends.base import LaunchRequest
from k8s_ai_orchestrator.backends.kubernetes.admission.base import AttemptJob
from k8s_ai_orchestrator.backends.kubernetes.admission.guard import waiting_for_room
from k8s_ai_orchestrator.backends.kubernetes.api import ApiRetry
from k8s_ai_orchestrator.backends.kubernetes.backend import KubernetesBackend
from k8s_ai_orchestrator.backends.kubernetes.config import KubernetesConfig
from k8s_ai_orchestrator.backends.kubernetes.gang_admission import GangAdmission
from k8s_ai_orchestrator.errors import ConfigError, SubmitError
from k8s_ai_orchestrator.spec import resolve_spec
from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

HIGHMEM = {"name": "highmem", "node": {"cpu": 96, "memory": "760Gi"}}
GPU = {
    "name": "gpu",
    "node": {"cpu": 64, "memory": "900Gi", "gpu": 8},
    "labels": {"nvidia.com/gpu.product": "h100"},
    "limit": {"gpu": 16},
}


@pytest.fixture(scope="module")
def emulators() -> Iterator[dict[str, Any]]:
    """Tenant `small` sees one 8 CPU / 16Gi node; tenant `empty` sees none (pools at zero)."""
    small = KubeEmulator(nodes=[NodeSpec(name="n1", cpu="8", memory="16Gi")], tenants=["small"])
    empty = KubeEmulator(nodes=[], tenants=["empty"])
    with small, empty:
        for name, emu in (("small", small), ("empty", empty)):
            for cls in ("k8s-ai-standard", "k8s-ai-preemptible"):
                SchedulingV1Api(emu.tenant(name).api_client()).create_priority_class(
                    {"metadata": {"name": cls}, "value": 1000}
                )
        yield {"small": small, "empty": empty}


def check(
    emulators: dict[str, Any],
    tags: dict[str, Any],
    pools: list[Any],
    where: str,
    selector: dict[str, str] | None = None,
) -> None:
    """The executor's validation of one step (its Job built, then pre-flight); `selector`
    goes into the steps' pods as `step_k8s_config` node_selector."""
    emu = emulators[where]
    raw: dict[str, Any] = {
        "image": "k8s-ai-test:latest",
        "gang_workdir": "/shared/gangs",
        "tenants": {where: {"kubeconfig": emu.tenant(where).kubeconfig_path, "node_pools": pools}},
    }
    if selector:
        raw["step_k8s_config"] = {"pod_spec_config": {"node_selector": selector}}
    spec = resolve_spec(tags)
    request = LaunchRequest("run", "big", 0, [sys.executable], {}, spec, tenant=where)
    backend = KubernetesBackend(KubernetesConfig.from_dict(raw), allowed_tenants=[where])
    try:
        backend.validate(request)
    finally:
        backend.close()


@pytest.mark.parametrize("where", ["small", "empty"])
def test_a_step_larger_than_every_node_waits_for_a_pool_that_can_create_its_node(
    emulators: dict[str, Any], where: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        check(emulators, {"size": "xl"}, [HIGHMEM], where)
    assert "can create its node(s) from pool(s) highmem" in caplog.text


def test_nodes_and_pools_count_only_with_the_labels_the_steps_pods_select(
    emulators: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """n1 holds a 4 CPU step, but not one whose pods select `pool: highmem`, which only the
    pool's nodes carry; a pool whose nodes lack the label does not count either."""
    tags = {"cpu": 4, "memory": "4Gi"}
    labelled = {**HIGHMEM, "labels": {"pool": "highmem"}}
    with caplog.at_level(logging.INFO):
        check(emulators, tags, [labelled], "small", selector={"pool": "highmem"})
    assert "can create its node(s) from pool(s) highmem" in caplog.text
    with pytest.raises(SubmitError, match="pool 'highmem' nodes do not carry pool=highmem"):
        check(emulators, tags, [HIGHMEM], "small", selector={"pool": "highmem"})
    with pytest.raises(SubmitError, match="no schedulable node with pool=highmem"):
        check(emulators, tags, [], "small", selector={"pool": "highmem"})


def test_without_pools_the_same_step_is_refused_by_the_largest_node(
    emulators: dict[str, Any],
) -> None:
    with pytest.raises(SubmitError, match=r"largest 8\b.*declare it in the tenant's node_pools"):
        check(emulators, {"size": "xl"}, [], "small")


def test_a_step_larger_than_every_pools_node_is_refused_naming_each_pool(
    emulators: dict[str, Any],
) -> None:
    small_pool = {"name": "standard", "node": {"cpu": 48, "memory": "384Gi"}}
    with pytest.raises(SubmitError) as refused:
        check(emulators, {"size": "xl"}, [small_pool, GPU], "empty")
    message = str(refused.value)
    assert "step 'big' (xl: 72 CPU / 450Gi) can never run in tenant 'empty'" in message
    assert "pool 'standard' creates nodes of at most cpu 48, memory 384Gi" in message
    assert "pool 'gpu' creates nodes of at most cpu 64" in message
    assert "raise that pool's node size or limit" in message


def test_a_gang_past_a_pools_limit_is_refused_naming_the_limit(
    emulators: dict[str, Any],
) -> None:
    tags = {"gpu": 8, "gpu_type": "h100", "cpu": 32, "memory": "400Gi", "nodes": 3}
    with pytest.raises(SubmitError, match="pool 'gpu' can create 2 such nodes before its limit"):
        check(emulators, tags, [GPU], "empty")
    check(emulators, {**tags, "nodes": 2}, [GPU], "empty")  # two fit under the limit


def test_a_pool_whose_nodes_lack_the_gpu_type_does_not_count(
    emulators: dict[str, Any],
) -> None:
    tags = {"gpu": 8, "gpu_type": "a100", "cpu": 32, "memory": "400Gi"}
    with pytest.raises(SubmitError, match="pool 'gpu' nodes do not carry .*=a100"):
        check(emulators, tags, [GPU], "empty")


@pytest.mark.parametrize(
    ("pools", "says"),
    [
        ({"name": "x"}, "must be a list of pools"),
        ([{"name": "x", "node": {"cpu": "lots", "memory": "1Gi"}}], r"node.cpu='lots' is not a"),
        ([{"name": "x", "node": {"cpu": 4}}], "must give both cpu and memory"),
        ([{"name": "x", "size": 4}], r"unknown key\(s\) \['size'\]"),
        ([{"node": {"cpu": 4, "memory": "1Gi"}}], "name must be the pool's name"),
        ([HIGHMEM, HIGHMEM], "pool names repeat"),
        ([{**HIGHMEM, "limit": {"disk": 1}}], r"limit: unknown key\(s\) \['disk'\]"),
    ],
)
def test_bad_node_pools_are_refused_with_the_key_and_the_fix(pools: Any, says: str) -> None:
    raw = {"tenants": {"a": {"kubeconfig": "/k", "node_pools": pools}}}
    with pytest.raises(ConfigError, match=says):
        KubernetesConfig.from_dict(raw)


@pytest.mark.parametrize(("pools", "waits"), [([], True), ([HIGHMEM], False)])
def test_the_guard_creates_a_gang_whose_missing_nodes_a_pool_can_create(
    emulators: dict[str, Any], pools: list[Any], waits: bool
) -> None:
    emu = emulators["small"]
    config = KubernetesConfig.from_dict(
        {
            "tenants": {
                "small": {"kubeconfig": emu.tenant("small").kubeconfig_path, "node_pools": pools}
            }
        }
    )
    spec = resolve_spec({"cpu": 4, "memory": "4Gi", "nodes": 2})
    request = LaunchRequest("run", "gang", 0, [sys.executable], {}, spec, tenant="small")
    job = AttemptJob(request, "small", "default", "gang-job")
    core = CoreV1Api(emu.tenant("small").api_client())
    why = waiting_for_room(config, ApiRetry(retries=0), core, job)
    if waits:
        assert why is not None and why.waiting == "WaitingForGangRoom"
        assert "1 of the 2 nodes it needs have room for one pod now (n1)" in why.message
    else:
        assert why is None


def test_a_partial_gang_gets_more_time_while_its_nodes_are_being_provisioned() -> None:
    raw = {"all_running_timeout_s": 120, "provisioning_timeout_s": 600}
    gangs = GangAdmission.from_dict(raw, "kubernetes.tenants.t")
    assert gangs.partial_limit_s(provisioning=False) == 120
    assert gangs.partial_limit_s(provisioning=True) == 720
    assert GangAdmission.from_dict(None, "t").provisioning_timeout_s == 900
    with pytest.raises(ConfigError, match="provisioning_timeout_s=-1"):
        GangAdmission.from_dict({"provisioning_timeout_s": -1}, "t")
