"""compute(...) and spec resolution: the size table, overrides and every bad input."""

from __future__ import annotations

import pytest

from k8s_ai_orchestrator import ComputeSpecError, compute
from k8s_ai_orchestrator.errors import ConfigError
from k8s_ai_orchestrator.launch.settings import ExecutorSettings
from k8s_ai_orchestrator.spec import GiB, parse_size_table, resolve_spec
from k8s_ai_orchestrator.tags import spec_from_tags


def test_size_classes_span_one_cpu_two_gib_to_seventy_two_cpu_450_gib():
    xs = spec_from_tags(compute("xs"))
    xl = spec_from_tags(compute("xl"))
    assert (xs.cpu, xs.memory_bytes) == (1, 2 * GiB)
    assert (xl.cpu, xl.memory_bytes) == (72, 450 * GiB)
    assert spec_from_tags(compute("gpu-1")).gpu == 1
    assert spec_from_tags(compute("gpu-8")).gpu == 8


def test_explicit_fields_override_the_size_class():
    spec = spec_from_tags(compute("m", memory="64Gi", preemptible=True, tenant="research"))
    assert spec.cpu == 8 and spec.memory_bytes == 64 * GiB
    assert spec.preemptible and spec.tenant == "research" and spec.size == "m"


def test_compute_returns_plain_string_tags_with_the_prefix():
    assert compute(cpu=4, memory="16Gi") == {"k8s_ai/cpu": "4", "k8s_ai/memory": "16Gi"}
    assert compute(nodes=2, gpus_per_node=8) == {"k8s_ai/nodes": "2", "k8s_ai/gpus_per_node": "8"}


@pytest.mark.parametrize(
    "quantity, expected",
    [("500m", 0.5), ("2", 2.0), (0.25, 0.25)],
)
def test_cpu_accepts_kubernetes_quantities(quantity, expected):
    assert spec_from_tags(compute(cpu=quantity)).cpu == expected


@pytest.mark.parametrize(
    "quantity, expected",
    [("450Gi", 450 * GiB), ("2G", 2_000_000_000), ("512Mi", 512 * 1024**2)],
)
def test_memory_accepts_kubernetes_quantities(quantity, expected):
    assert spec_from_tags(compute(memory=quantity)).memory_bytes == expected


def test_gang_fields_describe_a_multi_node_step():
    spec = spec_from_tags(compute(nodes=2, tasks_per_node=4, gpus_per_node=8, cpu=2))
    assert spec.is_gang and spec.gpu == 8 and spec.total_cpu == 16


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        ({"cpu": 0}, ["cpu=0", "> 0"]),
        ({"cpu": -1}, ["cpu=-1", "> 0"]),
        ({"cpu": "many"}, ["cpu='many'", "number"]),
        ({"memory": "lots"}, ["memory='lots'", "Gi"]),
        ({"memory": "450GB"}, ["memory='450GB'", '"450Gi"', '"450G"']),
        ({"gpu": 1.5}, ["gpu=1.5", "whole number"]),
        ({"nodes": 0}, ["nodes=0", ">= 1"]),
        ({"size": "huge"}, ["size='huge'", "xs, s, m, l, xl, gpu-1, gpu-8"]),
        ({"preemptible": "yes"}, ["preemptible='yes'", "True or False"]),
        ({"tenant": ""}, ["tenant=''", "DNS label"]),
        ({"backend": "mesos"}, ["backend='mesos'", "local, kubernetes, slurm"]),
    ],
)
def test_bad_values_raise_compute_spec_error_naming_field_value_and_allowed(kwargs, fragments):
    with pytest.raises(ComputeSpecError) as info:
        compute(**kwargs)
    assert isinstance(info.value, ValueError)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_hand_edited_tags_fail_with_the_step_named():
    with pytest.raises(ComputeSpecError, match="step 'mosaic': memory='1 TB'"):
        spec_from_tags({"k8s_ai/memory": "1 TB"}, step="mosaic")
    with pytest.raises(ComputeSpecError, match="step 'mosaic': unknown compute field"):
        spec_from_tags({"k8s_ai/cpus": "2"}, step="mosaic")


def test_size_table_is_data_and_can_be_overridden_and_extended():
    table = parse_size_table({"xl": {"memory": "300Gi"}, "huge": {"cpu": 96, "memory": "700Gi"}})
    assert resolve_spec({"size": "xl"}, table).memory_bytes == 300 * GiB
    assert resolve_spec({"size": "xl"}, table).cpu == 72
    assert resolve_spec({"size": "huge"}, table).cpu == 96


def test_a_new_size_class_needs_cpu_and_memory():
    with pytest.raises(ComputeSpecError, match="needs both cpu and memory"):
        parse_size_table({"tiny": {"cpu": 1}})


@pytest.mark.parametrize(
    "raw, fragment",
    [
        ({"local": {"cpus": 0}}, "local.cpus=0"),
        ({"local": {"memory": "0Gi"}}, "local.memory='0Gi'"),
        ({"local": {"oversize": "squeeze"}}, "local.oversize='squeeze'"),
        ({"allowed_tenants": ["a"], "default_tenant": "b"}, "default_tenant 'b'"),
        ({"oom_escalation": {"factor": 1}}, "factor=1.0"),
        ({"size_classes": {"xl": {"ram": "1Gi"}}}, "ram"),
    ],
)
def test_bad_executor_settings_name_the_key(raw, fragment):
    with pytest.raises(ConfigError) as info:
        ExecutorSettings.from_config(raw)
    assert fragment in str(info.value)


def test_gang_steps_go_to_slurm_when_slurm_is_configured():
    gang = spec_from_tags(compute(nodes=2))
    assert ExecutorSettings.from_config({"slurm": {}}).backend_for(gang) == "slurm"
    assert ExecutorSettings.from_config({}).backend_for(gang) == "local"
    single = spec_from_tags(compute("xs"))
    assert ExecutorSettings.from_config({"slurm": {}}).backend_for(single) == "local"
