"""GPUs through Dynamic Resource Allocation: the config, the claim template, the Job's pod.

Pure: nothing here talks to an API server (the real plane's tests are in
tests/controlplane/test_dra.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from k8s_ai_orchestrator.backends.base import LaunchRequest
from k8s_ai_orchestrator.backends.kubernetes.config import KubernetesConfig
from k8s_ai_orchestrator.backends.kubernetes.dra import (
    GpuRequest,
    claim_template,
    model_selector,
    template_name,
)
from k8s_ai_orchestrator.backends.kubernetes.dra_devices import (
    allocated_gpus,
    device_shares,
    offer_problem,
    pod_claim,
    pool_offer,
)
from k8s_ai_orchestrator.backends.kubernetes.dra_occupancy import free_devices, free_note
from k8s_ai_orchestrator.backends.kubernetes.jobs import build_job, job_name
from k8s_ai_orchestrator.errors import ComputeSpecError, ConfigError
from k8s_ai_orchestrator.spec import resolve_spec

DRA = {"request": "dra", "device_class": "gpu.nvidia.com"}


def config(backend_gpus: Any = None, **tenant: Any) -> KubernetesConfig:
    raw: dict[str, Any] = {
        "image": "ghcr.io/acme/pipeline:1.0",
        "tenants": {"team-a": {"kubeconfig": "/k", **tenant}},
    }
    if backend_gpus is not None:
        raw["gpus"] = backend_gpus
    return KubernetesConfig.from_dict(raw)


def request(fields: dict[str, object]) -> LaunchRequest:
    return LaunchRequest(
        "run-1", "embed", 0, ["python", "-c", "pass"], {}, resolve_spec(fields), tenant="team-a"
    )


def pod_of(conf: KubernetesConfig, fields: dict[str, object]) -> dict[str, Any]:
    manifest = build_job(request(fields), conf.tenant("team-a"), conf)
    pod: dict[str, Any] = manifest["spec"]["template"]["spec"]
    return pod


def test_device_plugin_is_the_default_and_keeps_the_gpu_limit_and_model_label() -> None:
    conf = config()
    assert not conf.gpus_of(conf.tenant("team-a")).dra
    pod = pod_of(conf, {"gpu": 2, "gpu_type": "nvidia-h100"})
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "nvidia-h100"}
    assert "resourceClaims" not in pod


def test_dra_pod_claims_the_jobs_template_and_has_no_gpu_limit_or_model_label() -> None:
    pod = pod_of(config(DRA), {"gpu": 2, "gpu_type": "nvidia-h100"})
    name = job_name(request({"gpu": 2}))
    assert pod["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": template_name(name)}
    ]
    resources = pod["containers"][0]["resources"]
    assert resources["claims"] == [{"name": "gpus"}]
    assert "nvidia.com/gpu" not in resources["limits"]
    assert "nvidia.com/gpu" not in resources["requests"]
    assert "nvidia.com/gpu.product" not in (pod.get("nodeSelector") or {})
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        pod["tolerations"]
    )


def test_dra_step_without_gpus_claims_nothing() -> None:
    pod = pod_of(config(DRA), {"size": "xs"})
    assert "resourceClaims" not in pod
    assert "claims" not in pod["containers"][0]["resources"]


def test_a_tenants_own_gpus_setting_overrides_the_backends() -> None:
    conf = config(DRA, gpus={"request": "device_plugin"})
    pod = pod_of(conf, {"gpu": 1})
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    tenant_dra = config(None, gpus=DRA)
    assert "resourceClaims" in pod_of(tenant_dra, {"gpu": 1})


def test_template_asks_for_exactly_count_devices_of_the_class_owned_by_the_job() -> None:
    gpus = GpuRequest.from_dict(DRA, "kubernetes.gpus")
    body = claim_template("k8s-ai-abc-0", "uid-7", resolve_spec({"gpu": 2, "gpu_type": "a"}), gpus)
    assert body["apiVersion"] == "resource.k8s.io/v1"
    assert body["kind"] == "ResourceClaimTemplate"
    assert body["metadata"]["name"] == "k8s-ai-abc-0-gpus"
    assert body["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "k8s-ai-abc-0",
            "uid": "uid-7",
            "blockOwnerDeletion": True,
        }
    ]
    (device_request,) = body["spec"]["spec"]["devices"]["requests"]
    assert device_request["name"] == "gpus"
    exactly = device_request["exactly"]
    assert exactly["deviceClassName"] == "gpu.nvidia.com"
    assert exactly["allocationMode"] == "ExactCount"
    assert exactly["count"] == 2
    assert exactly["selectors"] == [{"cel": {"expression": model_selector(gpus, "a")}}]


def test_template_without_gpu_type_has_no_selector() -> None:
    gpus = GpuRequest.from_dict(DRA, "kubernetes.gpus")
    body = claim_template("j-0", "u", resolve_spec({"gpu": 1}), gpus)
    assert "selectors" not in body["spec"]["spec"]["devices"]["requests"][0]["exactly"]


@pytest.mark.parametrize(
    ("attribute", "gpu_type", "expression"),
    [
        (
            None,
            "nvidia-h100-80gb-hbm3",
            'device.attributes["gpu.nvidia.com"].productName.lowerAscii().replace(" ", "-") '
            '== "nvidia-h100-80gb-hbm3"',
        ),
        (
            "gpu.example.com/model",
            "A100",
            'device.attributes["gpu.example.com"].model.lowerAscii().replace(" ", "-") == "a100"',
        ),
    ],
)
def test_model_selector_matches_the_attribute_as_a_label_style_name(
    attribute: str | None, gpu_type: str, expression: str
) -> None:
    raw = {**DRA, **({"model_attribute": attribute} if attribute else {})}
    assert model_selector(GpuRequest.from_dict(raw, "g"), gpu_type) == expression


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"request": "cdi"}, "kubernetes.gpus.request='cdi' is not one of device_plugin, dra"),
        ({"request": "dra"}, "request: dra needs device_class"),
        ({**DRA, "device_class": "GPU_Class"}, "device_class='GPU_Class' is not a DNS-1123"),
        ({**DRA, "model_attribute": "productName"}, "is not a qualified device attribute"),
        ({**DRA, "model_attribute": "gpu.nvidia.com/product-name"}, "qualified device"),
        ({"device_class": "gpu.nvidia.com"}, "device_class is only read with request: dra"),
        ({**DRA, "count": 2}, "unknown key(s) ['count']"),
        ("dra", "kubernetes.gpus must be a mapping"),
    ],
)
def test_bad_gpus_config_is_a_config_error_naming_the_key(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        config(raw)
    assert message in str(error.value)


def test_tenant_gpus_error_names_the_tenant() -> None:
    with pytest.raises(ConfigError, match=r"kubernetes\.tenants\.team-a\.gpus\.request"):
        config(None, gpus={"request": "mig"})


@pytest.mark.parametrize(
    ("tenant", "fields", "message"),
    [
        (
            {"gang_admission": {"mode": "kueue", "local_queue": "q"}},
            {"gpu": 1},
            "with gang_admission.mode: kueue is not supported yet",
        ),
    ],
)
def test_dra_steps_not_built_yet_are_refused_before_the_job_exists(
    tenant: dict[str, Any], fields: dict[str, object], message: str
) -> None:
    conf = config(DRA, **tenant)
    with pytest.raises(ConfigError) as error:
        build_job(request(fields), conf.tenant("team-a"), conf)
    assert "step 'embed'" in str(error.value)
    assert message in str(error.value)


def test_every_rank_pod_of_a_dra_gang_claims_its_own_devices_from_the_jobs_template() -> None:
    conf = KubernetesConfig.from_dict(
        {
            "image": "i",
            "gpus": DRA,
            "gang_workdir": "/shared",
            "tenants": {"team-a": {"kubeconfig": "/k"}},
        }
    )
    gang = request({"nodes": 2, "gpus_per_node": 1, "gpu_type": "nvidia-h100"})
    manifest = build_job(gang, conf.tenant("team-a"), conf)
    assert manifest["spec"]["completions"] == 2  # the Indexed Job's pods share its template
    pod = manifest["spec"]["template"]["spec"]
    name = template_name(job_name(gang))
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": name}]
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]
    body = claim_template(job_name(gang), "uid", gang.spec, conf.gpus)
    assert body["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 1


def test_dra_on_a_vcluster_tenant_is_refused_for_gpu_steps_only() -> None:
    conf = KubernetesConfig.from_dict(
        {
            "image": "i",
            "gpus": DRA,
            "tenants": {"team-a": {"vcluster": "a", "host_namespace": "vcluster-a"}},
        }
    )
    build_job(request({"size": "xs"}), conf.tenant("team-a"), conf)
    with pytest.raises(ConfigError, match="not supported on vCluster 'a' yet"):
        build_job(request({"gpu": 1}), conf.tenant("team-a"), conf)


def slice_of(node: str, *products: str, driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    devices = [
        {"name": f"gpu-{i}", "attributes": {"productName": {"string": p}}}
        for i, p in enumerate(products)
    ]
    return {"spec": {"driver": driver, "nodeName": node, "devices": devices}}


def test_pool_offer_counts_devices_per_node_and_label_style_model() -> None:
    gpus = GpuRequest.from_dict(DRA, "g")
    slices = [
        slice_of("n1", "NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"),
        slice_of("n2", "NVIDIA A100-SXM4-80GB"),
        slice_of("n3", "Other", driver="other.example.com"),  # not the model's driver
    ]
    assert pool_offer(gpus, slices) == {
        "n1": {"nvidia-h100-80gb-hbm3": 2},
        "n2": {"nvidia-a100-sxm4-80gb": 1},
    }


def test_a_qualified_attribute_is_read_whatever_the_driver() -> None:
    gpus = GpuRequest.from_dict({**DRA, "model_attribute": "gpu.example.com/model"}, "g")
    device = {"attributes": {"gpu.example.com/model": {"string": "X 1"}}}
    item = {"spec": {"driver": "d", "nodeName": "n", "devices": [device]}}
    assert pool_offer(gpus, [item]) == {"n": {"x-1": 1}}


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"gpu": 2, "gpu_type": "nvidia-h100"}, None),
        ({"gpu": 3}, None),  # any model: n1 has 3
        (
            {"gpu": 1, "gpu_type": "nvidia-b200"},
            "no device of model nvidia-b200 (the pool offers n1: 1 × nvidia-a100, "
            "2 × nvidia-h100; n2: 1 × nvidia-h100)",
        ),
        ({"gpu": 3, "gpu_type": "nvidia-h100"}, "3 devices of model nvidia-h100 on one node, "),
        ({"gpu": 4}, "4 devices on one node, and no node has more than 3 (the pool offers"),
        ({"nodes": 2, "gpus_per_node": 1, "gpu_type": "nvidia-h100"}, None),
        (
            {"nodes": 2, "gpus_per_node": 2, "gpu_type": "nvidia-h100"},
            "2 devices of model nvidia-h100 on each of 2 nodes (one claim per rank pod), and "
            "only 1 node offers that (the pool offers n1: ",
        ),
        (
            {"nodes": 3, "gpus_per_node": 1},
            "on each of 3 nodes (one claim per rank pod), and only 2 nodes offer that",
        ),
    ],
)
def test_offer_problem_names_what_no_node_can_give(
    fields: dict[str, object], problem: str | None
) -> None:
    offer = {"n1": {"nvidia-h100": 2, "nvidia-a100": 1}, "n2": {"nvidia-h100": 1}}
    found = offer_problem(resolve_spec(fields), offer)
    assert found is None if problem is None else problem in (found or "")


def test_an_empty_pool_offers_nothing() -> None:
    assert offer_problem(resolve_spec({"gpu": 1}), {}) == ("no device (the pool offers no devices)")


def allocation(*requests: str) -> dict[str, Any]:
    results = [
        {"request": r, "driver": "gpu.nvidia.com", "device": f"gpu-{i}"}
        for i, r in enumerate(requests)
    ]
    return {"status": {"allocation": {"devices": {"results": results}}}}


@pytest.mark.parametrize(
    ("claim", "devices"),
    [
        (allocation("gpus", "gpus"), 2),
        (allocation("gpus", "other"), 1),  # another request's device is not the step's GPU
        ({"status": {"allocation": {"devices": {}}}}, 0),
        ({"metadata": {"name": "not-allocated-yet"}}, 0),
    ],
)
def test_allocated_gpus_counts_the_claims_results_for_the_gpus_request(
    claim: dict[str, Any], devices: int
) -> None:
    assert allocated_gpus(claim, {}) == devices


def test_pod_claim_is_the_claim_the_controller_made_for_the_pods_gpus() -> None:
    made = [
        {"name": "other", "resourceClaimName": "p-other-1"},
        {"name": "gpus", "resourceClaimName": "p-gpus-x7"},
    ]
    assert pod_claim({"status": {"resourceClaimStatuses": made}}) == "p-gpus-x7"
    assert pod_claim({"status": {}}) is None


# -- GPU partitions (gpu_partition) ------------------------------------------------------------

MIG = {**DRA, "partition_device_class": "mig.nvidia.com"}


def test_a_partition_template_asks_the_partition_class_for_the_profile_and_model() -> None:
    gpus = GpuRequest.from_dict(MIG, "kubernetes.gpus")
    spec = resolve_spec({"gpu": 2, "gpu_partition": "1g.10gb", "gpu_type": "nvidia-h100"})
    body = claim_template("k8s-ai-abc-0", "uid-7", spec, gpus)
    (device_request,) = body["spec"]["spec"]["devices"]["requests"]
    exactly = device_request["exactly"]
    assert exactly["deviceClassName"] == "mig.nvidia.com"
    assert exactly["count"] == 2
    assert exactly["selectors"] == [
        {"cel": {"expression": 'device.attributes["gpu.nvidia.com"].profile == "1g.10gb"'}},
        {"cel": {"expression": model_selector(gpus, "nvidia-h100")}},
    ]


def test_a_partition_pod_claims_like_a_whole_gpu_pod() -> None:
    pod = pod_of(config(MIG), {"gpu": 1, "gpu_partition": "1g.10gb"})
    assert pod["resourceClaims"][0]["name"] == "gpus"
    assert "nvidia.com/gpu" not in pod["containers"][0]["resources"]["limits"]


@pytest.mark.parametrize(
    ("gpus", "message"),
    [
        (None, "gpu_partition='1g.10gb' needs gpus.request: dra on tenant 'team-a'"),
        (DRA, "gpu_partition='1g.10gb' needs gpus.partition_device_class on tenant 'team-a'"),
    ],
)
def test_a_partition_step_the_tenant_cannot_claim_is_refused_before_the_job_exists(
    gpus: Any, message: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        pod_of(config(gpus), {"gpu": 1, "gpu_partition": "1g.10gb"})
    assert message in str(refused.value)
    assert "step 'embed' (1 CPU / 2Gi / 1 × 1g.10gb GPU partition)" in str(refused.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({**DRA, "partition_device_class": "MIG"}, "partition_device_class='MIG' is not"),
        ({**DRA, "partition_attribute": "profile"}, "partition_attribute='profile' is not a"),
        ({"partition_device_class": "mig.nvidia.com"}, "partition_device_class is only read"),
    ],
)
def test_bad_partition_config_is_a_config_error_naming_the_key(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        GpuRequest.from_dict(raw, "kubernetes.gpus")
    assert message in str(refused.value)


def mig_slices() -> list[dict[str, Any]]:
    """One node, two H100s: gpu-0 whole, gpu-1 also as two 1g.10gb partitions (counters)."""

    def device(name: str, profile: str | None, memory: str, sms: str) -> dict[str, Any]:
        attributes: dict[str, Any] = {"productName": {"string": "NVIDIA H100 80GB HBM3"}}
        if profile:
            attributes["profile"] = {"string": profile}
        consumed = {"memory": {"value": memory}, "multiprocessors": {"value": sms}}
        return {
            "name": name,
            "attributes": attributes,
            "consumesCounters": [{"counterSet": "gpu-1", "counters": consumed}],
        }

    pool = {"name": "n1", "generation": 1, "resourceSliceCount": 2}
    total = {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "132"}}
    counters = {"name": "gpu-1", "counters": total}
    base = {"driver": "gpu.nvidia.com", "nodeName": "n1", "pool": pool}
    return [
        {"spec": {**base, "sharedCounters": [counters]}},
        {
            "spec": {
                **base,
                "devices": [
                    {
                        "name": "gpu-0",
                        "attributes": {"productName": {"string": "NVIDIA H100 80GB HBM3"}},
                    },
                    device("gpu-1", None, "80Gi", "132"),
                    device("gpu-1-mig-1g-10gb-0", "1g.10gb", "10Gi", "16"),
                    device("gpu-1-mig-1g-10gb-1", "1g.10gb", "10Gi", "16"),
                ],
            }
        },
    ]


def test_pool_offer_counts_whole_gpus_and_partitions_of_a_profile_apart() -> None:
    gpus = GpuRequest.from_dict(MIG, "g")
    assert pool_offer(gpus, mig_slices()) == {"n1": {"nvidia-h100-80gb-hbm3": 2}}
    assert pool_offer(gpus, mig_slices(), "1g.10gb") == {"n1": {"nvidia-h100-80gb-hbm3": 2}}
    assert pool_offer(gpus, mig_slices(), "3g.40gb") == {}
    spec = resolve_spec({"gpu": 1, "gpu_partition": "3g.40gb"})
    assert offer_problem(spec, {}) == "no 3g.40gb partition (the pool offers no such partitions)"
    three = resolve_spec({"gpu": 3, "gpu_partition": "1g.10gb"})
    problem = offer_problem(three, pool_offer(gpus, mig_slices(), "1g.10gb"))
    assert (problem or "").startswith("3 1g.10gb partitions on one node, and no node has more")


def test_a_partition_counts_its_share_of_its_gpu_and_a_whole_gpu_one() -> None:
    shares = device_shares(mig_slices())
    driver = "gpu.nvidia.com"
    assert shares[(driver, "n1", "gpu-1-mig-1g-10gb-0")] == 0.125  # 10Gi of 80Gi > 16/132
    assert shares[(driver, "n1", "gpu-1")] == 1.0
    assert (driver, "n1", "gpu-0") not in shares  # consumes no counters: one GPU
    results = [
        {"request": "gpus", "driver": driver, "pool": "n1", "device": name}
        for name in ("gpu-1-mig-1g-10gb-0", "gpu-1-mig-1g-10gb-1", "gpu-0")
    ]
    claim = {"status": {"allocation": {"devices": {"results": results}}}}
    assert allocated_gpus(claim, shares) == 1.25


# -- a least memory per GPU (gpu_memory) -------------------------------------------------------


def test_gpu_memory_adds_a_capacity_selector_to_the_claim() -> None:
    gpus = GpuRequest.from_dict(MIG, "kubernetes.gpus")
    spec = resolve_spec({"gpu": 1, "gpu_memory": "40Gi", "gpu_partition": "3g.40gb"})
    exactly = claim_template("j-0", "uid", spec, gpus)["spec"]["spec"]["devices"]["requests"][0]
    assert exactly["exactly"]["selectors"][-1] == {
        "cel": {
            "expression": (
                'device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0'
            )
        }
    }


def test_gpu_memory_on_a_device_plugin_tenant_is_refused_naming_the_fix() -> None:
    with pytest.raises(ConfigError) as refused:
        pod_of(config(), {"gpu": 1, "gpu_memory": "40Gi"})
    assert "gpu_memory='40Gi' needs gpus.request: dra on tenant 'team-a'" in str(refused.value)


def test_gpu_memory_needs_a_gpu_and_is_a_memory_quantity() -> None:
    with pytest.raises(ComputeSpecError, match="gpu_memory is per GPU and needs gpu >= 1"):
        resolve_spec({"gpu_memory": "40Gi"})
    with pytest.raises(ComputeSpecError, match="gpu_memory must be a number with a unit"):
        resolve_spec({"gpu": 1, "gpu_memory": "40"})
    spec = resolve_spec({"gpu": 2, "gpu_type": "h100", "gpu_memory": "40Gi"})
    assert spec.describe() == "1 CPU / 2Gi / 2 GPU (h100, ≥ 40Gi each)"


def test_pool_offer_with_gpu_memory_counts_the_devices_with_that_much() -> None:
    gpus = GpuRequest.from_dict(MIG, "g")
    slices = mig_slices()
    for device in slices[1]["spec"]["devices"]:
        device["capacity"] = {"memory": {"value": "10Gi" if "-mig-" in device["name"] else "80Gi"}}
    assert pool_offer(gpus, slices, None, 64 * 2**30) == {"n1": {"nvidia-h100-80gb-hbm3": 2}}
    assert pool_offer(gpus, slices, "1g.10gb", 20 * 2**30) == {}
    spec = resolve_spec({"gpu": 1, "gpu_partition": "1g.10gb", "gpu_memory": "20Gi"})
    assert offer_problem(spec, {}) == (
        "no 1g.10gb partition with at least 20Gi of memory (the pool offers no such partitions)"
    )


# -- which devices are free for a waiting step -------------------------------------------------


def holding(*devices: str) -> dict[str, Any]:
    results = [{"driver": "gpu.nvidia.com", "pool": "n1", "device": d} for d in devices]
    return {"status": {"allocation": {"devices": {"results": results}}}}


def test_a_gpu_one_of_whose_partitions_is_held_is_not_free() -> None:
    gpus = GpuRequest.from_dict(MIG, "g")
    whole = resolve_spec({"gpu": 1})
    part = resolve_spec({"gpu": 1, "gpu_partition": "1g.10gb"})
    claims = [holding("gpu-1-mig-1g-10gb-0")]
    assert free_devices(gpus, mig_slices(), claims, whole) == {"n1": (1, 2)}  # gpu-0 only
    assert free_devices(gpus, mig_slices(), claims, part) == {"n1": (1, 2)}  # the other one
    assert free_devices(gpus, mig_slices(), [holding("gpu-1")], part) == {"n1": (0, 2)}
    assert free_devices(gpus, mig_slices(), [], part) == {"n1": (2, 2)}


def test_the_free_note_names_the_nodes_the_kind_and_what_is_not_seen() -> None:
    part = resolve_spec({"gpu": 2, "gpu_partition": "1g.10gb", "gpu_type": "H100"})
    note = free_note(part, {"n1": (1, 2)}, " (only the claims of namespace 'ml' are visible)")
    assert note == (
        "free now: n1 1 of 2 1g.10gb partitions of model h100 "
        "(only the claims of namespace 'ml' are visible)"
    )
    assert free_note(part, {}) == "free now: no node has 1g.10gb partitions of model h100"
