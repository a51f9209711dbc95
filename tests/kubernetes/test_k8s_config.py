"""The backend's config section: typos and half-configured tenants are refused up front."""

from __future__ import annotations

import pytest

from k8s_ai_orchestrator.backends.kubernetes.config import KubernetesConfig
from k8s_ai_orchestrator.errors import ConfigError


def test_unknown_keys_are_refused_with_the_allowed_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['imagee'\]; allowed: .*image"):
        KubernetesConfig.from_dict({"imagee": "x"})
    with pytest.raises(
        ConfigError, match=r"kubernetes.tenants.a: unknown key\(s\) \['kubconfig'\]"
    ):
        KubernetesConfig.from_dict({"tenants": {"a": {"kubconfig": "/k"}}})


def test_a_tenant_needs_exactly_one_way_to_reach_its_api() -> None:
    with pytest.raises(ConfigError, match="either 'kubeconfig'"):
        KubernetesConfig.from_dict({"tenants": {"a": {"namespace": "x"}}})
    with pytest.raises(ConfigError, match="needs 'host_namespace'.*vcluster-a"):
        KubernetesConfig.from_dict({"tenants": {"a": {"vcluster": "a"}}})


def test_workload_gang_admission_on_a_vcluster_tenant_is_refused_naming_the_other_modes() -> None:
    """vCluster's syncer carries no PodGroups to the host: a `workload` gang would not gang."""
    vcluster = {"vcluster": "a", "host_namespace": "vcluster-a"}
    with pytest.raises(ConfigError, match=r"tenants.a: .*workload cannot gang on vCluster 'a'"):
        KubernetesConfig.from_dict(
            {"tenants": {"a": {**vcluster, "gang_admission": {"mode": "workload"}}}}
        )
    for mode in ("guard", "kueue"):
        admission = {"mode": mode, **({"local_queue": "q"} if mode == "kueue" else {})}
        KubernetesConfig.from_dict({"tenants": {"a": {**vcluster, "gang_admission": admission}}})
    host = {"kubeconfig": "/host", "gang_admission": {"mode": "workload"}}  # a plain cluster
    assert KubernetesConfig.from_dict({"tenants": {"h": host}}).tenant("h").gang_admission.podgroups


def test_defaults_are_restricted_and_name_the_priority_classes() -> None:
    config = KubernetesConfig.from_dict(
        {"tenants": {"a": {"vcluster": "a", "host_namespace": "vcluster-a", "server": "https://a"}}}
    )
    tenant = config.tenant("a")
    assert (tenant.namespace, tenant.server) == ("default", "https://a")
    assert config.priority_classes.preemptible == "k8s-ai-preemptible"
    assert config.security_context["allowPrivilegeEscalation"] is False


def test_asking_for_an_unconfigured_tenant_lists_the_configured_ones() -> None:
    config = KubernetesConfig.from_dict({"tenants": {"a": {"kubeconfig": "/k"}}})
    with pytest.raises(
        ConfigError, match=r"tenant 'b' is not configured; configured tenants: \['a'\]"
    ):
        config.tenant("b")
