"""The Job a step becomes: compared field by field with checked-in golden manifests.

Regenerate after an intended change with `UPDATE_GOLDEN=1 pytest tests/kubernetes` (the run
rewrites the files and fails; review the diff, then run again without it).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from dagster import __version__ as dagster_version

from k8s_ai_orchestrator.backends.base import LaunchRequest
from k8s_ai_orchestrator.backends.kubernetes.config import KubernetesConfig
from k8s_ai_orchestrator.backends.kubernetes.jobs import (
    build_job,
    container_args,
    describe_manifest,
    job_name,
)
from k8s_ai_orchestrator.errors import ConfigError, SubmitError
from k8s_ai_orchestrator.spec import resolve_spec
from tests.support import update_golden

GOLDEN = Path(__file__).parent / "golden"
STEP_ARGV = ["/venv/bin/python", "-m", "dagster", "api", "execute_step", '{"step": "x"}']

CONFIG = KubernetesConfig.from_dict(
    {
        "image": "ghcr.io/acme/pipeline:1.0",
        "service_account": "k8s-ai-steps",
        "env_secrets": ["pipeline-credentials"],
        "tenants": {
            "team-a": {"kubeconfig": "/etc/k8s-ai/team-a.yaml", "namespace": "pipelines"},
            "research": {
                "vcluster": "research",
                "host_namespace": "vcluster-research",
                "image": "ghcr.io/acme/research:2.0",
            },
        },
        "gpu_node_selectors": {"gpu-8": {"node.kubernetes.io/instance-type": "p5.48xlarge"}},
    }
)


def request(
    fields: dict[str, object], *, tenant: str = "team-a", **kwargs: object
) -> LaunchRequest:
    defaults: dict[str, object] = {
        "run_id": "5f0c2a8e-7d1b-4e8e-9a51-0d3c1f2b7a90",
        "step_key": "mosaic",
        "attempt": 0,
        "command": STEP_ARGV,
        "env": {"K8S_AI_BACKEND": "kubernetes", "K8S_AI_STEP_KEY": "mosaic"},
        "spec": resolve_spec(fields),
        "tenant": tenant,
        "grace_period_s": 120.0,
    }
    defaults.update(kwargs)
    return LaunchRequest(**defaults)  # type: ignore[arg-type]


def assert_matches_golden(name: str, manifest: dict[str, object]) -> None:
    text = describe_manifest(manifest).replace(json.dumps(dagster_version), '"<dagster-version>"')
    path = GOLDEN / f"{name}.json"
    update_golden(path, text)
    assert text == path.read_text(), f"{path.name} differs; see the diff above"


def test_xl_step_requests_its_size_and_memory_limit_on_the_standard_priority() -> None:
    manifest = build_job(request({"size": "xl"}), CONFIG.tenant("team-a"), CONFIG)
    assert_matches_golden("xl_step", manifest)
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == {
        "requests": {"cpu": "72", "memory": "450Gi"},
        "limits": {"memory": "450Gi"},
    }


def test_preemptible_gpu_step_gets_gpu_placement_and_the_low_priority_class() -> None:
    fields = {"size": "gpu-8", "gpu_type": "nvidia-h100-80gb", "preemptible": True}
    manifest = build_job(
        request(fields, tenant="research", step_key="embed", attempt=2),
        CONFIG.tenant("research"),
        CONFIG,
    )
    assert_matches_golden("preemptible_gpu_step", manifest)
    pod = manifest["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == "k8s-ai-preemptible"
    assert pod["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "p5.48xlarge",
        "nvidia.com/gpu.product": "nvidia-h100-80gb",
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in (
        pod["tolerations"]
    )


def test_dagster_k8s_config_tag_is_honoured_but_the_spec_owns_cpu_and_memory() -> None:
    tag = {
        "container_config": {
            "resources": {"requests": {"cpu": "1", "ephemeral-storage": "20Gi"}},
            "env": [{"name": "MODE", "value": "fast"}],
        },
        "pod_spec_config": {"node_selector": {"pool": "highmem"}},
        "job_spec_config": {"active_deadline_seconds": 7200},
    }
    labels = {"dagster/job": "imagery", "dagster-k8s/config": json.dumps(tag)}
    manifest = build_job(request({"size": "m"}, labels=labels), CONFIG.tenant("team-a"), CONFIG)
    assert_matches_golden("dagster_k8s_config_tag", manifest)
    pod = manifest["spec"]["template"]["spec"]
    resources = pod["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "8", "memory": "32Gi", "ephemeral-storage": "20Gi"}
    assert pod["nodeSelector"] == {"pool": "highmem"}
    assert manifest["spec"]["activeDeadlineSeconds"] == 7200


def test_labels_are_sanitized_and_raw_values_kept_in_annotations() -> None:
    step = "train.model[shard=3]/with a very long name that does not fit in a label value at all"
    manifest = build_job(request({"size": "xs"}, step_key=step), CONFIG.tenant("team-a"), CONFIG)
    labels = manifest["metadata"]["labels"]
    assert (
        labels["k8s-ai/step"] == "train.model-shard-3--with-a-very-long-name-that-does-not-fit-in"
    )
    assert all(len(value) <= 63 for value in labels.values())
    assert manifest["metadata"]["annotations"]["k8s-ai/step-key"] == step
    assert len(manifest["metadata"]["name"]) <= 63


def test_every_attempt_gets_its_own_job_name() -> None:
    names = {job_name(request({"size": "xs"}, attempt=n)) for n in range(3)}
    assert len(names) == 3


def test_restricted_security_context_is_the_default_and_can_be_replaced() -> None:
    manifest = build_job(request({"size": "xs"}), CONFIG.tenant("team-a"), CONFIG)
    default = manifest["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert default["runAsNonRoot"] is True and default["runAsUser"] == 1000
    assert default["capabilities"] == {"drop": ["ALL"]}
    custom = KubernetesConfig.from_dict(
        {
            "image": "x:1",
            "security_context": {"runAsUser": 4242, "runAsNonRoot": True},
            "tenants": {"team-a": {"kubeconfig": "/k"}},
        }
    )
    manifest = build_job(request({"size": "xs"}), custom.tenant("team-a"), custom)
    assert manifest["spec"]["template"]["spec"]["containers"][0]["securityContext"] == {
        "runAsUser": 4242,
        "runAsNonRoot": True,
    }


def test_step_argv_uses_the_configured_entrypoint() -> None:
    assert container_args(STEP_ARGV, CONFIG) == ["dagster", "api", "execute_step", '{"step": "x"}']
    prefixed = KubernetesConfig.from_dict({"command_prefix": ["/opt/venv/bin/dagster"]})
    assert container_args(STEP_ARGV, prefixed)[0] == "/opt/venv/bin/dagster"
    assert container_args(["/usr/bin/python3", "-c", "pass"], CONFIG) == ["python", "-c", "pass"]


def test_a_step_without_an_image_is_refused_with_the_key_to_set() -> None:
    bare = KubernetesConfig.from_dict({"tenants": {"team-a": {"kubeconfig": "/k"}}})
    with pytest.raises(ConfigError, match="kubernetes.image"):
        build_job(request({"size": "xs"}), bare.tenant("team-a"), bare)


def test_a_multi_node_step_needs_a_gang_workdir_every_pod_mounts() -> None:
    with pytest.raises(ConfigError, match="step 'mosaic'.*set kubernetes.gang_workdir"):
        build_job(request({"nodes": 2, "gpu": 8}), CONFIG.tenant("team-a"), CONFIG)


def test_a_multi_node_step_is_one_indexed_job_with_one_pod_per_node() -> None:
    config = replace(CONFIG, gang_workdir="/shared/k8s_ai")
    fields = {"nodes": 2, "tasks_per_node": 4, "cpu": 2, "memory": "64Gi", "gpus_per_node": 4}
    manifest = build_job(request(fields), config.tenant("team-a"), config)
    assert_matches_golden("job_gang_2x4", manifest)


def test_a_malformed_dagster_k8s_config_tag_names_the_step_and_the_tag() -> None:
    labels = {"dagster-k8s/config": '{"container_config": {"resources": 5}'}
    with pytest.raises(SubmitError, match="step 'mosaic'.*dagster-k8s/config"):
        build_job(request({"size": "xs"}, labels=labels), CONFIG.tenant("team-a"), CONFIG)


def test_step_k8s_config_places_every_step_and_a_step_s_tag_merges_over_it() -> None:
    """As k8s_job_executor's `step_k8s_config`: defaults for every step, the tag on top
    (maps merged key by key, lists joined)."""
    pool = {"key": "pool", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
    config = replace(
        CONFIG,
        step_k8s_config=KubernetesConfig.from_dict(
            {
                "step_k8s_config": {
                    "pod_spec_config": {
                        "node_selector": {"pool": "batch", "zone": "a"},
                        "tolerations": [pool],
                    }
                }
            }
        ).step_k8s_config,
    )
    plain = build_job(request({"size": "xs"}), config.tenant("team-a"), config)
    pod = plain["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "batch", "zone": "a"}
    assert pod["tolerations"] == [pool]

    highmem = {"pod_spec_config": {"node_selector": {"pool": "highmem"}}}
    labels = {"dagster-k8s/config": json.dumps(highmem)}
    tagged = build_job(request({"size": "xs"}, labels=labels), config.tenant("team-a"), config)
    pod = tagged["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "highmem", "zone": "a"}
    assert pod["tolerations"] == [pool]
    assert (
        pod["containers"][0]["resources"]["limits"]["memory"]
        == plain["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"]
    )  # the spec still owns the size


def test_a_step_k8s_config_dagster_k8s_would_refuse_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"kubernetes.step_k8s_config .*\"pod_spec\" at the root"):
        KubernetesConfig.from_dict({"step_k8s_config": {"pod_spec": {"node_selector": {}}}})
