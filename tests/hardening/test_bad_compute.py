"""Every bad compute value is refused at definition time, with field, value and fix named.

One table per way in: `compute(...)` arguments, hand-written `k8s_ai/...` op tags (which name
the step), and `size_classes` rows of the executor config. Each row is a value a user wrote and
the parts of the message they must see.
"""

from __future__ import annotations

import pytest

from k8s_ai_orchestrator import ComputeSpecError, compute
from k8s_ai_orchestrator.backends.base import FailureReason
from k8s_ai_orchestrator.errors import ConfigError
from k8s_ai_orchestrator.launch.relaunch import OomEscalation, RelaunchPolicy, StepHistory, decide
from k8s_ai_orchestrator.launch.settings import ExecutorSettings
from k8s_ai_orchestrator.quantities import parse_memory
from k8s_ai_orchestrator.spec import GiB, MiB, parse_size_table
from k8s_ai_orchestrator.tags import spec_from_tags

NAN = float("nan")
INF = float("inf")

COMPUTE_CASES = [
    # durations: "m" is refused, never read as milli
    pytest.param({"timeout": "30m"}, ["timeout='30m'", '"30min"', '"1800"'], id="timeout-30m"),
    pytest.param({"timeout": "1.5m"}, ["timeout='1.5m'", '"1.5min"', '"90"'], id="timeout-1.5m"),
    pytest.param({"timeout": "500m"}, ["timeout='500m'", '"500min"'], id="timeout-500m"),
    pytest.param({"timeout": "forever"}, ["timeout='forever'", "omit timeout"], id="timeout-word"),
    pytest.param({"timeout": "30 min"}, ["timeout='30 min'", "'30min'"], id="timeout-space"),
    pytest.param({"timeout": "30sec"}, ["timeout='30sec'", '"30s"'], id="timeout-sec"),
    pytest.param({"timeout": "1h30min"}, ["timeout='1h30min'", '"2h"'], id="timeout-compound"),
    pytest.param({"timeout": 0}, ["timeout=0", "at least 1 second"], id="timeout-zero"),
    pytest.param({"timeout": -5}, ["timeout=-5", "from 1s"], id="timeout-negative"),
    pytest.param({"timeout": "0.5s"}, ["timeout='0.5s'", "at least 1 second"], id="timeout-subsec"),
    pytest.param(
        {"timeout": "400d"}, ["timeout='400d'", "365d", "omit timeout"], id="timeout-400d"
    ),
    pytest.param({"timeout": NAN}, ["timeout=nan", "finite"], id="timeout-nan"),
    pytest.param({"timeout": INF}, ["timeout=inf", "finite"], id="timeout-inf"),
    pytest.param({"timeout": 10**400}, ["timeout=1000", "365d"], id="timeout-huge-int"),
    pytest.param({"timeout": True}, ["timeout=True", "seconds"], id="timeout-bool"),
    # memory: a unit is required, at least 1Mi, below 8Ei
    pytest.param({"memory": "512m"}, ["memory='512m'", "milli", '"512Mi"'], id="memory-milli"),
    pytest.param({"memory": 16}, ["memory=16", "without a unit", '"16Mi"'], id="memory-bare-int"),
    pytest.param({"memory": "512"}, ["memory='512'", '"512Mi"'], id="memory-bare-string"),
    pytest.param({"memory": 17179869184}, ["memory=17179869184", '"16Gi"'], id="memory-bytes"),
    pytest.param({"memory": 1e9}, ["memory=1000000000.0", '"1G"'], id="memory-bytes-float"),
    pytest.param(
        {"memory": "512Ki"}, ["memory='512Ki'", "524288 bytes", '"512Mi"'], id="memory-1ki"
    ),
    pytest.param({"memory": "1k"}, ["memory='1k'", "1000 bytes", "1Mi"], id="memory-tiny"),
    pytest.param({"memory": "0Gi"}, ["memory='0Gi'", "1Mi"], id="memory-zero"),
    pytest.param({"memory": "-1Gi"}, ["memory='-1Gi'", "with a unit"], id="memory-negative"),
    pytest.param({"memory": "450GB"}, ['"450Gi" (binary)', '"450G" (decimal)'], id="memory-gb"),
    pytest.param({"memory": "2gi"}, ["memory='2gi'", '"2Gi"'], id="memory-lowercase"),
    pytest.param({"memory": "16GiB"}, ["memory='16GiB'", '"16Gi"'], id="memory-gib"),
    pytest.param(
        {"memory": " 2Gi"}, ["memory=' 2Gi'", "remove the whitespace: '2Gi'"], id="mem-ws"
    ),
    pytest.param({"memory": "2Gi\n"}, ["memory='2Gi\\n'", "'2Gi'"], id="memory-newline"),
    pytest.param({"memory": "12xb"}, ["memory='12xb'", "'xb' is not a unit"], id="memory-unit"),
    pytest.param({"memory": "9Ei"}, ["memory='9Ei'", "Kubernetes can represent"], id="memory-9ei"),
    pytest.param(
        {"memory": "1" * 40 + "Gi"}, ["memory='1111", "Kubernetes can represent"], id="memory-big"
    ),
    pytest.param({"memory": "1e400"}, ["memory='1e400'", "with a unit"], id="memory-1e400"),
    pytest.param({"memory": NAN}, ["memory=nan", "finite"], id="memory-nan"),
    pytest.param({"memory": INF}, ["memory=inf", "finite"], id="memory-inf"),
    # cpu
    pytest.param({"cpu": NAN}, ["cpu=nan", "finite"], id="cpu-nan"),
    pytest.param({"cpu": INF}, ["cpu=inf", "finite"], id="cpu-inf"),
    pytest.param({"cpu": "1e400"}, ["cpu='1e400'", '"500m"'], id="cpu-1e400"),
    pytest.param({"cpu": 10**400}, ["cpu=1000", "Kubernetes can represent"], id="cpu-huge-int"),
    pytest.param({"cpu": 1e300}, ["cpu=1e+300", "Kubernetes can represent"], id="cpu-huge-float"),
    pytest.param({"cpu": 0.0001}, ["cpu=0.0001", "below 1m"], id="cpu-below-1m"),
    pytest.param({"cpu": "0.5m"}, ["cpu='0.5m'", "below 1m"], id="cpu-half-millicore"),
    pytest.param({"cpu": "2Gi"}, ["cpu='2Gi'", "number of cores"], id="cpu-memory-unit"),
    pytest.param({"cpu": "4\n"}, ["cpu='4\\n'", "remove the whitespace: '4'"], id="cpu-newline"),
    pytest.param({"cpu": True}, ["cpu=True", "number of cores"], id="cpu-bool"),
    # counts
    pytest.param({"gpu": NAN}, ["gpu=nan", "finite"], id="gpu-nan"),
    pytest.param({"gpu": 1e400}, ["gpu=inf", "finite"], id="gpu-1e400-float"),
    pytest.param({"gpu": 10**400}, ["gpu=1000", "2147483647"], id="gpu-huge-int"),
    pytest.param({"gpu": -1}, ["gpu=-1", "whole number >= 0"], id="gpu-negative"),
    pytest.param({"gpu": True}, ["gpu=True", "whole number"], id="gpu-bool"),
    pytest.param({"nodes": INF}, ["nodes=inf", "finite"], id="nodes-inf"),
    pytest.param({"nodes": 2**31}, ["nodes=2147483648", "at most 2147483647"], id="nodes-int32"),
    pytest.param({"tasks_per_node": 0}, ["tasks_per_node=0", ">= 1"], id="tasks-zero"),
    pytest.param({"gpus_per_node": 2.5}, ["gpus_per_node=2.5", "whole number"], id="gpn-fraction"),
    # names
    pytest.param({"gpu_type": "a100\n"}, ["gpu_type='a100\\n'", "'a100'"], id="gpu-type-newline"),
    pytest.param({"gpu_type": "a100 80gb"}, ["gpu_type='a100 80gb'", "label"], id="gpu-type-space"),
    pytest.param({"gpu_type": "a" * 64}, ["gpu_type='aaaa", "1-63"], id="gpu-type-too-long"),
    pytest.param({"gpu_type": ""}, ["gpu_type=''", "1-63"], id="gpu-type-empty"),
    pytest.param({"gpu_type": "a100;rm"}, ["gpu_type='a100;rm'", "GRES"], id="gpu-type-semicolon"),
    pytest.param({"tenant": "research\n"}, ["tenant='research\\n'", "'research'"], id="tenant-nl"),
    pytest.param(
        {"backend": "slurm\n"}, ["backend='slurm\\n'", "local, kubernetes"], id="backend-nl"
    ),
    pytest.param({"size": "xl\n"}, ["size='xl\\n'", "xs, s, m"], id="size-newline"),
]


@pytest.mark.parametrize("kwargs, fragments", COMPUTE_CASES)
def test_compute_refuses_the_value_naming_field_value_and_fix(kwargs, fragments):
    with pytest.raises(ComputeSpecError) as info:
        compute(**kwargs)
    assert isinstance(info.value, ValueError)
    for fragment in fragments:
        assert fragment in str(info.value)


TAG_CASES = [
    pytest.param({"k8s_ai/timeout": "30m"}, ["timeout='30m'", '"30min" or "1800"'], id="timeout-m"),
    pytest.param({"k8s_ai/timeout": "nan"}, ["timeout='nan'", "seconds"], id="timeout-nan"),
    pytest.param({"k8s_ai/timeout": "1e400"}, ["timeout='1e400'", "365d"], id="timeout-1e400"),
    pytest.param({"k8s_ai/memory": "512m"}, ["memory='512m'", '"512Mi"'], id="memory-milli"),
    pytest.param({"k8s_ai/memory": "16"}, ["memory='16'", '"16Mi"'], id="memory-bare"),
    pytest.param({"k8s_ai/memory": "1e400"}, ["memory='1e400'", "with a unit"], id="memory-1e400"),
    pytest.param({"k8s_ai/memory": "inf"}, ["memory='inf'", "with a unit"], id="memory-inf"),
    pytest.param({"k8s_ai/cpu": "NaN"}, ["cpu='NaN'", "number of cores"], id="cpu-nan"),
    pytest.param({"k8s_ai/cpu": "Infinity"}, ["cpu='Infinity'", "number of"], id="cpu-infinity"),
    pytest.param({"k8s_ai/cpu": "1e400"}, ["cpu='1e400'", '"500m"'], id="cpu-1e400"),
    pytest.param(
        {"k8s_ai/cpu": "9" * 30}, ["cpu='9999", "Kubernetes can represent"], id="cpu-huge"
    ),
    pytest.param({"k8s_ai/gpu": "1e400"}, ["gpu='1e400'", "whole number"], id="gpu-1e400"),
    pytest.param({"k8s_ai/nodes": "2.5"}, ["nodes='2.5'", "whole number"], id="nodes-fraction"),
    pytest.param({"k8s_ai/nodes": "٣"}, ["nodes='٣'", "whole number"], id="nodes-arabic-digit"),
    pytest.param({"k8s_ai/gpu_type": "a100\n"}, ["gpu_type='a100\\n'", "'a100'"], id="gpu-type-nl"),
    pytest.param({"k8s_ai/preemptible": "yes"}, ["preemptible='yes'", "True"], id="preemptible"),
    pytest.param({"k8s_ai/cpus": "2"}, ["unknown compute field", "'cpus'"], id="unknown-field"),
]


@pytest.mark.parametrize("tags, fragments", TAG_CASES)
def test_hand_written_tags_follow_the_same_rules_and_name_the_step(tags, fragments):
    with pytest.raises(ComputeSpecError) as info:
        spec_from_tags(tags, step="mosaic")
    assert str(info.value).startswith("step 'mosaic': ")
    for fragment in fragments:
        assert fragment in str(info.value)


SIZE_TABLE_CASES = [
    pytest.param({"xl": None}, ["size_classes.xl=None", "{xl: {cpu: 8"], id="row-null"),
    pytest.param({"xl": "big"}, ["size_classes.xl='big'", "mapping"], id="row-string"),
    pytest.param(["xl"], ["size_classes=['xl']", "mapping"], id="table-list"),
    pytest.param({"xl": {"cpu": None}}, ["size_classes.xl.cpu=None", "cores"], id="cpu-null"),
    pytest.param({"xl": {"memory": "300"}}, ["size_classes.xl.memory='300'", '"300Mi"'], id="mem"),
    pytest.param({"xl": {"memory": 300}}, ["size_classes.xl.memory=300", '"300Mi"'], id="mem-int"),
    pytest.param({"xl": {"cpu": NAN}}, ["size_classes.xl.cpu=nan", "finite"], id="cpu-nan"),
    pytest.param({"xl": {"gpu": INF}}, ["size_classes.xl.gpu=inf", "finite"], id="gpu-inf"),
    pytest.param({"huge": {"cpu": 96}}, ["'huge' needs both cpu and memory"], id="new-incomplete"),
    pytest.param({"Huge": {"cpu": 1, "memory": "1Gi"}}, ["'Huge'", "DNS label"], id="name-case"),
    pytest.param({1: {"cpu": 1, "memory": "1Gi"}}, ["name 1", "DNS label"], id="name-int"),
    pytest.param({"xl": {1: 2, "ram": 3}}, ["unknown keys ['ram', 1]"], id="unknown-mixed-keys"),
]


@pytest.mark.parametrize("raw, fragments", SIZE_TABLE_CASES)
def test_size_class_table_refuses_bad_rows_with_the_class_named(raw, fragments):
    with pytest.raises(ComputeSpecError) as info:
        parse_size_table(raw)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_a_null_size_class_in_executor_config_is_a_config_error_not_a_type_error():
    with pytest.raises(ConfigError, match=r"size_classes\.xl=None is not allowed"):
        ExecutorSettings.from_config({"size_classes": {"xl": None}})


def test_timeout_forever_no_longer_suggests_a_cpu_quantity():
    with pytest.raises(ComputeSpecError) as info:
        compute(timeout="forever")
    assert "500m" not in str(info.value) and "cores" not in str(info.value)


@pytest.mark.parametrize(
    "timeout, seconds",
    [(1800, 1800.0), (90.5, 90.5), ("1800", 1800.0), ("30s", 30.0), ("30min", 1800.0)]
    + [("2h", 7200.0), ("1d", 86400.0), ("1.5h", 5400.0), ("365d", 365 * 86400.0)],
)
def test_durations_are_seconds_or_a_number_with_s_min_h_or_d(timeout, seconds):
    assert spec_from_tags(compute(timeout=timeout)).timeout_s == seconds


@pytest.mark.parametrize(
    "memory, num_bytes",
    [("450Gi", 450 * GiB), ("2G", 2 * 10**9), ("1Mi", MiB), ("1.5Gi", 3 * GiB // 2)]
    + [("1048576k", 1048576000), ("7Ei", 7 * 2**60)],
)
def test_memory_keeps_the_kubernetes_forms_with_a_unit(memory, num_bytes):
    assert spec_from_tags(compute(memory=memory)).memory_bytes == num_bytes


@pytest.mark.parametrize("cpu, cores", [("500m", 0.5), ("1m", 0.001), (0.001, 0.001), ("72", 72.0)])
def test_cpu_keeps_cores_and_millicores(cpu, cores):
    assert spec_from_tags(compute(cpu=cpu)).cpu == cores


def test_gpu_type_accepts_node_label_values_that_are_also_gres_types():
    spec = spec_from_tags(compute("gpu-1", gpu_type="NVIDIA-A100-SXM4-80GB"))
    assert spec.gpu_type == "NVIDIA-A100-SXM4-80GB"


@pytest.mark.parametrize(
    "memory, shown",
    [
        ("1.5G", "1.5G"),
        ("2G", "2G"),
        ("1048576k", "1000Mi"),
        ("1.5Gi", "1536Mi"),
        ("450Gi", "450Gi"),
    ],
)
def test_memory_is_shown_as_a_readable_exact_quantity_never_raw_bytes(memory, shown):
    spec = spec_from_tags(compute(cpu=1, memory=memory))
    assert spec.memory_quantity == shown
    assert spec.describe() == f"1 CPU / {shown}"
    assert parse_memory(shown) == spec.memory_bytes  # the Job requests exactly what was asked


def test_a_decimal_memory_reads_as_such_in_the_oom_relaunch_message():
    policy = RelaunchPolicy(OomEscalation(factor=2, max_memory_bytes=8 * GiB, max_attempts=3))
    memory = spec_from_tags(compute(cpu=1, memory="1.5G")).memory_bytes

    decision = decide(policy, StepHistory("embed", (memory,)), FailureReason.OOM_KILLED)

    assert decision.relaunch
    assert "OOMKilled with 1.5G; relaunching with 1.5G → 2862Mi (attempt 2/3)" in decision.message
    assert "1500000000" not in decision.message
