"""The tenant chart renders and lints with the real Helm library and fits the backend.

Rendering is offline (no cluster): `helm_python` binds Helm's Go SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.utils import parse_quantity

from k8s_ai_orchestrator.backends.kubernetes.config import KubernetesConfig
from k8s_ai_orchestrator.spec import DEFAULT_SIZE_CLASSES
from k8s_ai_orchestrator.testing.priorityclasses import CHART_CLASSES
from tests.requirements import DEV_EXTRA, require_module

helm = require_module("helm_python", "the Helm SDK (helm-python-sdk)", DEV_EXTRA)

CHART = Path(__file__).parent.parent / "helm" / "k8s-ai-tenant"
VCLUSTER_VALUES = CHART.parent / "vcluster-values.yaml"
XL = DEFAULT_SIZE_CLASSES["xl"]


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    manifests = helm.Chart.load(CHART).render(values, name="team-a", namespace="default")
    documents = []
    for path, text in manifests.items():
        if path.endswith(".yaml"):
            documents.extend(d for d in yaml.safe_load_all(text) if d)
    return documents


def by_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in documents if d["kind"] == kind]


def test_chart_lints_clean_in_strict_mode() -> None:
    report = helm.lint(CHART, strict=True)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == [] and problems == []


def test_quota_and_limit_range_admit_an_xl_step() -> None:
    documents = render()
    (quota,) = by_kind(documents, "ResourceQuota")
    hard = quota["spec"]["hard"]
    assert parse_quantity(hard["requests.cpu"]) >= XL.cpu
    assert parse_quantity(hard["requests.memory"]) >= parse_quantity(XL.memory)
    assert parse_quantity(hard["limits.memory"]) >= parse_quantity(XL.memory)
    (limits,) = by_kind(documents, "LimitRange")
    maximum = limits["spec"]["limits"][0]["max"]
    assert parse_quantity(maximum["cpu"]) >= XL.cpu
    assert parse_quantity(maximum["memory"]) >= parse_quantity(XL.memory)


def test_priority_classes_are_the_ones_the_backend_uses_by_default() -> None:
    classes = {d["metadata"]["name"]: d for d in by_kind(render(), "PriorityClass")}
    defaults = KubernetesConfig().priority_classes
    assert set(classes) == {defaults.default, defaults.preemptible}
    assert classes[defaults.preemptible]["value"] < classes[defaults.default]["value"]
    assert classes[defaults.preemptible]["preemptionPolicy"] == "Never"
    # what test clusters install in their place (k8s_ai_orchestrator.testing.priorityclasses)
    policy = {defaults.default: "PreemptLowerPriority", defaults.preemptible: "Never"}
    assert [(c["metadata"]["name"], c["value"], c["preemptionPolicy"]) for c in CHART_CLASSES] == [
        (name, classes[name]["value"], classes[name].get("preemptionPolicy", policy[name]))
        for name in (defaults.default, defaults.preemptible)
    ]


def test_executor_role_grants_exactly_what_the_backend_calls() -> None:
    (role,) = [r for r in by_kind(render(), "Role") if r["metadata"]["name"] == "k8s-ai-executor"]
    grants = {
        (group, resource): set(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert grants[("batch", "jobs")] >= {"create", "delete", "get", "list", "watch"}
    assert grants[("", "pods")] >= {"list", "watch"}
    assert grants[("", "pods/log")] == {"get"}
    assert grants[("", "pods/resize")] == {"patch"}  # in-place growth, nothing else
    assert grants[("scheduling.k8s.io", "podgroups")] == {"create", "get"}  # workload gangs
    assert grants[("resource.k8s.io", "resourceclaimtemplates")] == {"create"}  # gpus: dra
    assert grants[("resource.k8s.io", "resourceclaims")] == {"get", "list"}  # GPU-seconds, free
    assert grants[("", "events")] >= {"list"}
    assert grants[("", "resourcequotas")] >= {"list"}
    assert "secrets" not in {resource for _, resource in grants}


def node_grants(documents: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """(resource, verb) of every node rule in any Role or ClusterRole of a render."""
    return {
        (resource, verb)
        for document in documents
        if document["kind"] in ("Role", "ClusterRole")
        for rule in document["rules"]
        if "" in rule["apiGroups"]
        for resource in rule["resources"]
        if resource == "nodes" or resource.startswith("nodes/")
        for verb in rule["verbs"]
    }


def test_by_default_the_executor_lists_nodes_but_gets_no_node_proxy() -> None:
    """`get nodes/proxy` is exec-equivalent (the kubelet's /exec through the API server)."""
    assert node_grants(render()) == {("nodes", "list")}  # the pre-flight node-size check


def test_the_pre_flight_reads_of_dra_devices_come_with_list_nodes_and_are_read_only() -> None:
    grants = {
        (group, resource): set(rule["verbs"])
        for document in by_kind(render(), "ClusterRole")
        for rule in document["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        if group == "resource.k8s.io"
    }
    assert grants == {
        ("resource.k8s.io", "deviceclasses"): {"get"},
        ("resource.k8s.io", "resourceslices"): {"list"},
        ("resource.k8s.io", "resourceclaims"): {"list"},
    }
    assert not by_kind(render({"rbac": {"listNodes": False}}), "ClusterRole")


def test_node_proxy_is_granted_only_with_its_own_opt_in() -> None:
    assert ("nodes/proxy", "get") in node_grants(render({"rbac": {"nodeProxy": True}}))
    only_proxy = render({"rbac": {"listNodes": False, "nodeProxy": True}})
    assert node_grants(only_proxy) == {("nodes/proxy", "get")}
    assert node_grants(render({"rbac": {"listNodes": False}})) == set()
    assert not by_kind(render({"rbac": {"listNodes": False}}), "ClusterRoleBinding")


def test_the_node_proxy_opt_in_is_documented_as_exec_equivalent_and_off() -> None:
    values_text = (CHART / "values.yaml").read_text()
    assert yaml.safe_load(values_text)["rbac"]["nodeProxy"] is False
    assert "exec-equivalent" in values_text and "oom_escalation.grow_at" in values_text


def test_host_install_only_grants_reading_the_vcluster_secret() -> None:
    documents = render({"tenantObjects": False, "hostSecretAccess": {"enabled": True}})
    assert {d["kind"] for d in documents} == {"Role", "RoleBinding"}
    (role,) = by_kind(documents, "Role")
    assert role["metadata"]["namespace"] == "vcluster-team-a"
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["vc-team-a"],
            "verbs": ["get"],
        }
    ]


def test_missing_namespace_name_fails_rendering_with_the_value_to_set() -> None:
    with pytest.raises(helm.HelmError, match="namespace.name is required"):
        render({"namespace": {"name": ""}})


def test_vcluster_values_sync_priority_classes_and_leave_room_for_an_xl_step() -> None:
    values = yaml.safe_load(VCLUSTER_VALUES.read_text())
    assert values["sync"]["toHost"]["priorityClasses"]["enabled"] is True
    quota = values["policies"]["resourceQuota"]["quota"]
    chart_quota = yaml.safe_load((CHART / "values.yaml").read_text())["quota"]["hard"]
    for key in ("requests.cpu", "requests.memory", "limits.memory"):
        assert parse_quantity(str(quota[key])) >= parse_quantity(str(chart_quota[key]))
    assert parse_quantity(str(quota["requests.cpu"])) >= XL.cpu
    assert parse_quantity(quota["requests.memory"]) >= parse_quantity(XL.memory)


def test_kueue_objects_are_rendered_only_when_enabled_with_a_cluster_queue_per_tenant() -> None:
    kinds = {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    assert not [d for d in render() if d["kind"] in kinds]
    documents = render({"tenant": "research", "kueue": {"enabled": True}})
    (flavor,) = by_kind(documents, "ResourceFlavor")
    (queue,) = by_kind(documents, "ClusterQueue")
    (local,) = by_kind(documents, "LocalQueue")
    assert queue["metadata"]["name"] == "research"
    assert queue["spec"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "pipelines"}
    }
    assert queue["spec"]["preemption"]["withinClusterQueue"] == "LowerPriority"
    (group,) = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert group["flavors"][0]["name"] == flavor["metadata"]["name"] == "default-flavor"
    quota = {r["name"]: r["nominalQuota"] for r in group["flavors"][0]["resources"]}
    assert quota == {"cpu": "160", "memory": "1000Gi", "nvidia.com/gpu": "8"}
    assert (local["metadata"]["name"], local["metadata"]["namespace"]) == ("k8s-ai", "pipelines")
    assert local["spec"]["clusterQueue"] == "research"
    (role,) = by_kind(documents, "Role")
    kueue_rules = [r for r in role["rules"] if r["apiGroups"] == ["kueue.x-k8s.io"]]
    assert kueue_rules == [
        {
            "apiGroups": ["kueue.x-k8s.io"],
            "resources": ["localqueues", "workloads"],
            "verbs": ["get", "list"],
        }
    ]
    config = KubernetesConfig.from_dict(
        {
            "tenants": {
                "research": {
                    "kubeconfig": "/k",
                    "namespace": "pipelines",
                    "gang_admission": {"mode": "kueue", "local_queue": local["metadata"]["name"]},
                }
            }
        }
    )
    assert config.tenants["research"].gang_admission.local_queue == "k8s-ai"
