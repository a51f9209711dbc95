"""A run with a bad value anywhere is refused at run start, before anything is submitted.

Each case is a real Dagster run of `ai_executor` (in a temporary instance) against the
Kubernetes emulator. The run must fail with a STEP_FAILURE on each refused step that names
the field, the value and what is allowed, one run failure naming every refused step, no step
started, and no Job or pod created in any tenant.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    DagsterEventType,
    DagsterInstance,
    DependencyDefinition,
    GraphDefinition,
    In,
    JobDefinition,
    Nothing,
    build_reconstructable_job,
    execute_job,
    op,
)
from kubernetes.client import CoreV1Api, SchedulingV1Api

from k8s_ai_orchestrator import ai_executor, compute
from k8s_ai_orchestrator.errors import (
    ComputeSpecError,
    ConfigError,
    OrchestratorError,
    RunRefusedError,
    SubmitError,
    TenantAccessError,
)
from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(600)]

TENANTS = ("team-a", "team-b")
NAMESPACE = "default"
SMALL = compute(cpu=0.5, memory="256Mi")
K8S_CONFIG_TAG = "dagster-k8s/config"

# -- the jobs: built from a JSON description so that a step process could reconstruct them --


def bad_run_job(description: str) -> JobDefinition:
    """A job of independent (or chained) no-op steps: {name: {"tags": ..., "after": [...]}}."""
    steps: dict[str, dict[str, Any]] = json.loads(description)
    ops = []
    deps: dict[str, dict[str, DependencyDefinition]] = {}
    for name, step in steps.items():
        after = list(step.get("after", []))
        ins = {f"after_{up}": In(Nothing) for up in after}
        ops.append(op(name=name, ins=ins, tags=step["tags"])(_noop))
        deps[name] = {f"after_{up}": DependencyDefinition(up) for up in after}
    graph = GraphDefinition(name="bad_run", node_defs=ops, dependencies=deps)
    return graph.to_job(executor_def=ai_executor)


def _noop() -> None:
    """Never runs: every run of this module is refused before its first step starts."""


# -- the emulated cluster: small nodes, a quota in team-b, the tenants' priority classes ---


@pytest.fixture(scope="module")
def emulator() -> Iterator[Any]:
    nodes = [NodeSpec(name="node-a", cpu="8", memory="16Gi")]
    with KubeEmulator(nodes=nodes, tenants=list(TENANTS), tls=False, workdir=None) as emu:
        for tenant in TENANTS:
            client = emu.tenant(tenant).api_client()
            for name in ("k8s-ai-standard", "k8s-ai-preemptible"):
                SchedulingV1Api(client).create_priority_class(
                    {"metadata": {"name": name}, "value": 1000}
                )
        CoreV1Api(emu.tenant("team-b").api_client()).create_namespaced_resource_quota(
            NAMESPACE,
            {"metadata": {"name": "team-b-quota"}, "spec": {"hard": {"requests.memory": "1Gi"}}},
        )
        yield emu


def base_config(emu: Any) -> dict[str, Any]:
    """A valid executor config for both emulated tenants."""
    return {
        "backend": "kubernetes",
        "default_tenant": "team-a",
        "allowed_tenants": list(TENANTS),
        "kubernetes": {
            "image": "ghcr.io/acme/pipeline:test",
            "python": sys.executable,
            "command_prefix": [sys.executable, "-m", "dagster"],
            "tenants": {
                t: {"kubeconfig": emu.tenant(t).kubeconfig_path, "namespace": NAMESPACE}
                for t in TENANTS
            },
        },
    }


Config = dict[str, Any]


def k8s(**values: Any) -> Callable[[Config, Any, Path], None]:
    """Set keys of the `kubernetes` section."""

    def change(config: Config, emu: Any, tmp: Path) -> None:
        config["kubernetes"].update(values)

    return change


def tenant_b(**values: Any) -> Callable[[Config, Any, Path], None]:
    """Replace keys of tenant team-b (None deletes the key)."""

    def change(config: Config, emu: Any, tmp: Path) -> None:
        settings = config["kubernetes"]["tenants"]["team-b"]
        for key, value in values.items():
            value = value(emu, tmp) if callable(value) else value
            if value is None:
                settings.pop(key, None)
            else:
                settings[key] = value

    return change


def pools_on_a(*pools: Mapping[str, Any]) -> Callable[[Config, Any, Path], None]:
    """Declare team-a's autoscaled node pools."""

    def change(config: Config, emu: Any, tmp: Path) -> None:
        config["kubernetes"]["tenants"]["team-a"]["node_pools"] = list(pools)

    return change


def top(**values: Any) -> Callable[[Config, Any, Path], None]:
    """Set top-level executor config keys."""

    def change(config: Config, emu: Any, tmp: Path) -> None:
        config.update(values)

    return change


def garbage_kubeconfig(emu: Any, tmp: Path) -> str:
    path = tmp / "garbage-kubeconfig"
    path.write_text("apiVersion: v1\nclusters: [unclosed\n")
    return str(path)


def host_kubeconfig(emu: Any, tmp: Path) -> str:
    return str(emu.host.kubeconfig_path)


@dataclass(frozen=True)
class Case:
    """One bad run: its steps, the config change, what each refused step's failure says."""

    steps: Mapping[str, Mapping[str, Any]]  # name → {"tags": {...}, "after": [...]}
    refused: Mapping[str, tuple[str, ...]]  # step → parts its STEP_FAILURE message contains
    change: Callable[[Config, Any, Path], None] = field(default=lambda c, e, t: None)


def one(tags: Mapping[str, str], *parts: str, change: Any = None) -> Case:
    """A run with step `bad` (the given tags) and an independent good step `fine`."""
    steps = {"fine": {"tags": SMALL}, "bad": {"tags": dict(tags)}}
    return Case(steps, {"bad": parts}, change or (lambda c, e, t: None))


def with_config(change: Any, *parts: str) -> Case:
    """A run of one good-looking step under a bad executor config."""
    return Case({"step": {"tags": SMALL}}, {"step": parts}, change)


def k8s_tag(value: Any) -> dict[str, str]:
    return {**SMALL, K8S_CONFIG_TAG: value if isinstance(value, str) else json.dumps(value)}


ON_B = compute(cpu=0.5, memory="256Mi", tenant="team-b")

CASES: dict[str, Case] = {
    # names written into the Job, from the executor config
    "namespace-uppercase": one(
        ON_B,
        "kubernetes.tenants.team-b.namespace='Team_A'",
        "DNS-1123 label",
        change=tenant_b(namespace="Team_A"),
    ),
    "namespace-too-long": one(
        ON_B, "namespace='" + "n" * 64, "at most 63", change=tenant_b(namespace="n" * 64)
    ),
    "image-pull-policy-lowercase": with_config(
        k8s(image_pull_policy="always"),
        "kubernetes.image_pull_policy='always'",
        "Always, IfNotPresent, Never",
    ),
    "image-pull-policy-unknown": with_config(
        k8s(image_pull_policy="Sometimes"), "'Sometimes'", "Always, IfNotPresent, Never"
    ),
    "priority-class-default-invalid": with_config(
        k8s(priority_classes={"default": "Urgent_Class"}),
        "kubernetes.priority_classes.default='Urgent_Class'",
        "DNS-1123 subdomain",
    ),
    "priority-class-preemptible-invalid": with_config(
        k8s(priority_classes={"preemptible": "low priority"}),
        "kubernetes.priority_classes.preemptible='low priority'",
        "DNS-1123 subdomain",
    ),
    "priority-class-missing-in-tenant": with_config(
        k8s(priority_classes={"default": "does-not-exist"}),
        "PriorityClass 'does-not-exist' does not exist in tenant 'team-a'",
    ),
    "label-key-with-space": with_config(
        k8s(labels={"team name": "imagery"}), "kubernetes.labels key='team name'", "label key"
    ),
    "label-key-bad-prefix": with_config(
        k8s(labels={"Example.COM/team": "imagery"}), "'Example.COM/team'", "DNS-1123 subdomain"
    ),
    "label-value-too-long": with_config(
        k8s(labels={"team": "x" * 64}), "kubernetes.labels.team='xxx", "at most 63"
    ),
    "label-value-bad-chars": with_config(
        k8s(labels={"team": "geo imagery"}), "kubernetes.labels.team='geo imagery'", "label value"
    ),
    "env-var-name-starts-with-digit": with_config(
        k8s(env_vars=["1TOKEN=x"]), "kubernetes.env_vars='1TOKEN'", "environment variable name"
    ),
    "env-var-name-with-space": with_config(
        k8s(env_vars=["MY VAR=x"]), "kubernetes.env_vars='MY VAR'", "environment variable name"
    ),
    "gpu-type-label-not-a-label-key": with_config(
        k8s(gpu_type_label="bad label!"),
        "kubernetes.gpu_type_label='bad label!' is not allowed",
        "a label key",
        "set it to the node label that holds the GPU model",
    ),
    "security-context-user-name-for-user-id": with_config(
        k8s(security_context={"runAsUser": "root"}),
        "kubernetes.security_context.runAsUser='root' is not allowed",
        "takes a whole number",
    ),
    "security-context-unknown-field": with_config(
        k8s(security_context={"runAsUsr": 1000}),
        "kubernetes.security_context: unknown field(s) ['runAsUsr']",
        "runAsUser",
    ),
    "env-var-copied-from-the-worker-but-unset": with_config(
        k8s(env_vars=["H2A_UNSET_VAR"]),
        "kubernetes.env_vars='H2A_UNSET_VAR' is not set in the run worker's environment",
        "set H2A_UNSET_VAR where the run starts",
        "H2A_UNSET_VAR=<value>",
    ),
    "service-account-invalid": with_config(
        k8s(service_account="Default SA"), "kubernetes.service_account='Default SA'"
    ),
    "image-pull-secret-invalid": with_config(
        k8s(image_pull_secrets=["Reg_Cred"]), "kubernetes.image_pull_secrets='Reg_Cred'"
    ),
    # names written into the Job, from the step's dagster-k8s/config tag
    "env-var-name-from-tag": one(
        k8s_tag({"container_config": {"env": [{"name": "9lives", "value": "x"}]}}),
        "env var name '9lives'",
        "dagster-k8s/config",
    ),
    "image-pull-policy-from-tag": one(
        k8s_tag({"container_config": {"image_pull_policy": "sometimes"}}),
        "imagePullPolicy 'sometimes'",
        "Always, IfNotPresent, Never",
    ),
    "pod-label-key-from-tag": one(
        k8s_tag({"pod_template_spec_metadata": {"labels": {"bad key!": "v"}}}),
        "pod label key 'bad key!'",
    ),
    "dagster-k8s-config-not-json": one(
        k8s_tag("{not json"), "dagster-k8s/config tag is invalid", "fix the tag's JSON"
    ),
    # reaching the tenant
    "kubeconfig-missing": one(
        ON_B,
        "tenant 'team-b': cannot load kubeconfig /nonexistent/team-b.yaml",
        change=tenant_b(kubeconfig="/nonexistent/team-b.yaml"),
    ),
    "kubeconfig-garbage": one(
        ON_B,
        "tenant 'team-b': cannot load kubeconfig",
        change=tenant_b(kubeconfig=garbage_kubeconfig),
    ),
    "vcluster-name-invalid": one(
        ON_B,
        "kubernetes.tenants.team-b.vcluster='My_VC'",
        "vc-<name>",
        change=tenant_b(kubeconfig=None, vcluster="My_VC", host_namespace="vcluster-x"),
    ),
    "vcluster-host-namespace-invalid": one(
        ON_B,
        "kubernetes.tenants.team-b.host_namespace='Host NS'",
        change=tenant_b(kubeconfig=None, vcluster="team-b", host_namespace="Host NS"),
    ),
    "vcluster-secret-missing": one(
        ON_B,
        "cannot read secret vc-absent in host namespace vcluster-absent",
        change=tenant_b(
            kubeconfig=None,
            vcluster="absent",
            host_namespace="vcluster-absent",
            host_kubeconfig=host_kubeconfig,
        ),
    ),
    "tenant-not-configured": one(
        compute(cpu=0.5, memory="256Mi", tenant="team-c"),
        "tenant 'team-c', which is not configured",
        change=top(allowed_tenants=["team-a", "team-b", "team-c"]),
    ),
    "tenant-not-allowed": one(
        compute(cpu=0.5, memory="256Mi", tenant="team-z"), "'team-z'", "allowed_tenants"
    ),
    "size-not-allowed-in-tenant": one(
        compute("m", tenant="team-b"),
        "size class 'm', which tenant 'team-b' does not accept",
        change=tenant_b(allowed_sizes=["xs", "s"]),
    ),
    # (unknown keys are refused by the typed config schema at launch: test_bad_executor_config)
    "kubernetes-config-bad-value": with_config(
        k8s(api_retries=-1), "kubernetes backend, whose config is invalid", "api_retries=-1"
    ),
    "no-image": with_config(k8s(image=None), "no image for tenant 'team-a'"),
    "gang-on-kubernetes-without-a-shared-workdir": one(
        compute(nodes=2, cpu=1, memory="1Gi"), "multi-node gang", "kubernetes.gang_workdir"
    ),
    # pre-flight: the step can never run where it is routed
    "larger-than-every-node": one(
        compute("xl"), "step 'bad' (xl", "can never run in tenant 'team-a'", "largest 8"
    ),
    "larger-than-every-node-and-every-pool": one(
        compute("xl"),
        "can never run in tenant 'team-a'",
        "no node pool can create the rest: pool 'standard' creates nodes of at most cpu 48",
        change=pools_on_a({"name": "standard", "node": {"cpu": 48, "memory": "384Gi"}}),
    ),
    "past-a-node-pools-limit": one(
        compute("xl"),
        "pool 'highmem' can create 0 such nodes before its limit of cpu 64",
        change=pools_on_a(
            {"name": "highmem", "node": {"cpu": 96, "memory": "760Gi"}, "limit": {"cpu": 64}}
        ),
    ),
    "node-pool-bad-quantity": with_config(
        pools_on_a({"name": "highmem", "node": {"cpu": "lots", "memory": "760Gi"}}),
        "node_pools[0].node.cpu='lots' is not a quantity",
    ),
    "gpu-on-a-cluster-without-gpus": one(
        compute("gpu-1"), "can never run in tenant 'team-a'", "gpu (needs 1, largest 0)"
    ),
    "over-the-tenant-quota": one(
        compute(cpu=0.5, memory="2Gi", tenant="team-b"),
        "ResourceQuota 'team-b-quota' allows 1Gi",
        "requests.memory=2Gi",
    ),
    "step-above-the-escalation-cap": one(
        compute(cpu=0.5, memory="512Mi"),
        "declares 512Mi of memory",
        "oom_escalation.max_memory=256Mi",
        change=top(oom_escalation={"max_memory": "256Mi"}),
    ),
    # compute rules read from raw op tags
    "cpu-tag-negative": one({"k8s_ai/cpu": "-1"}, "step 'bad'", "cpu"),
    "unknown-size-class": one({"k8s_ai/size": "xxl"}, "step 'bad'", "xxl"),
    # several bad steps: one error names them all
    "three-bad-steps-among-good-ones": Case(
        {
            "tiles": {"tags": SMALL},
            "mosaic": {"tags": compute("xl")},
            "elsewhere": {"tags": compute(cpu=0.5, memory="256Mi", tenant="team-z")},
            "embed": {"tags": k8s_tag({"container_config": {"env": [{"name": "0x"}]}})},
            "report": {"tags": SMALL, "after": ["tiles", "mosaic"]},
        },
        {
            "mosaic": ("can never run in tenant 'team-a'",),
            "elsewhere": ("'team-z'",),
            "embed": ("env var name '0x'",),
        },
    ),
}


@pytest.fixture
def no_job_access(emulator: Any) -> Iterator[None]:
    emulator.set_permission("team-a", "create", "jobs", False)
    yield
    emulator.set_permission("team-a", "create", "jobs", True)


# -- running a case ----------------------------------------------------------------------------


def run_case(
    case: Case, emu: Any, instance: DagsterInstance, tmp_path: Path
) -> tuple[Any, dict[str, list[str]], str]:
    """Run the case; returns the result, STEP_FAILURE messages per step, the run failure."""
    config = base_config(emu)
    case.change(config, emu, tmp_path)
    recon = build_reconstructable_job(
        __name__, bad_run_job.__name__, reconstructable_args=(json.dumps(case.steps),)
    )
    result = execute_job(
        recon,
        instance=instance,
        run_config={"execution": {"config": config}},
        raise_on_error=False,
    )
    failures: dict[str, list[str]] = {}
    for record in instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_FAILURE):
        event = record.dagster_event
        assert event is not None and event.step_key is not None
        failures.setdefault(event.step_key, []).append(event.step_failure_data.error.message)
    (run_failure,) = instance.all_logs(result.run_id, of_type=DagsterEventType.RUN_FAILURE)
    error = run_failure.dagster_event.event_specific_data.error  # type: ignore[union-attr]
    return result, failures, error.message if error else ""


def _error_tree(kind: type) -> set[str]:
    return {kind.__name__}.union(*(_error_tree(sub) for sub in kind.__subclasses__()))


LIBRARY_ERRORS = _error_tree(OrchestratorError)


def failure_types(instance: DagsterInstance, run_id: str) -> dict[str, str | None]:
    """The error class name (`cls_name`) of each step's STEP_FAILURE."""
    return {
        str(r.dagster_event.step_key): r.dagster_event.step_failure_data.error.cls_name
        for r in instance.all_logs(run_id, of_type=DagsterEventType.STEP_FAILURE)
        if r.dagster_event is not None
    }


def assert_nothing_submitted(emu: Any, instance: DagsterInstance, run_id: str) -> None:
    for server in (*TENANTS, "host"):
        assert emu.jobs(server) == [], f"a Job was created in {server}"
        assert emu.pods(server) == [], f"a pod was created in {server}"
    assert instance.all_logs(run_id, of_type=DagsterEventType.STEP_START) == []
    launches = [
        r
        for r in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
        if (r.dagster_event and (r.dagster_event.message or "").startswith("Launching step"))
    ]
    assert launches == []


@pytest.mark.parametrize("case_id", list(CASES), ids=list(CASES))
def test_bad_run_is_refused_at_run_start_with_nothing_submitted(
    case_id: str, emulator: Any, instance: DagsterInstance, tmp_path: Path
) -> None:
    case = CASES[case_id]
    result, failures, run_error = run_case(case, emulator, instance, tmp_path)

    assert not result.success
    assert sorted(failures) == sorted(case.refused)
    kinds = failure_types(instance, result.run_id)
    for step, parts in case.refused.items():
        (message,) = failures[step]
        assert f"'{step}'" in message
        for part in parts:
            assert part in message, f"{part!r} not in STEP_FAILURE of {step}: {message}"
        assert kinds[step] in LIBRARY_ERRORS, f"STEP_FAILURE of {step} is a {kinds[step]}"
        assert f"{kinds[step]}: step '{step}'" in run_error
    assert "can never run as configured; nothing was submitted" in run_error
    assert_nothing_submitted(emulator, instance, result.run_id)


def test_tenant_without_permission_to_create_jobs_is_refused_before_any_step_runs(
    emulator: Any, instance: DagsterInstance, tmp_path: Path, no_job_access: None
) -> None:
    case = one(SMALL, "may not create Jobs in namespace 'default' of tenant 'team-a'")
    result, failures, run_error = run_case(case, emulator, instance, tmp_path)

    assert sorted(failures) == ["bad", "fine"]
    assert "may not create Jobs" in failures["bad"][0]
    assert "2 steps of this run" in run_error
    assert_nothing_submitted(emulator, instance, result.run_id)


def test_run_fails_with_one_run_refused_error_naming_every_refused_step_in_plan_order(
    emulator: Any, instance: DagsterInstance, tmp_path: Path
) -> None:
    result, _, run_error = run_case(
        CASES["three-bad-steps-among-good-ones"], emulator, instance, tmp_path
    )

    (run_failure,) = instance.all_logs(result.run_id, of_type=DagsterEventType.RUN_FAILURE)
    error = run_failure.dagster_event.event_specific_data.error  # type: ignore[union-attr]
    assert error.cls_name == RunRefusedError.__name__
    lines = run_error.splitlines()
    assert lines[0].endswith(
        "RunRefusedError: 3 steps of this run can never run as configured; nothing was submitted:"
    )
    assert [line.split("'")[1] for line in lines[1:]] == ["elsewhere", "embed", "mosaic"]


# The library error that refused each step (a few of each kind): its STEP_FAILURE keeps it.
REFUSED_AS = {
    "cpu-tag-negative": ComputeSpecError,  # op tags written by hand
    "step-above-the-escalation-cap": ConfigError,
    "tenant-not-allowed": TenantAccessError,
    "kubeconfig-missing": ConfigError,
    "kubernetes-config-bad-value": ConfigError,  # api_retries=-1
    "larger-than-every-node": SubmitError,
}


@pytest.mark.parametrize("case_id", list(REFUSED_AS), ids=list(REFUSED_AS))
def test_a_refused_steps_dagster_failure_keeps_the_library_error_type(
    case_id: str, emulator: Any, instance: DagsterInstance, tmp_path: Path
) -> None:
    kind, (step,) = REFUSED_AS[case_id].__name__, CASES[case_id].refused
    result, _, run_error = run_case(CASES[case_id], emulator, instance, tmp_path)

    (record,) = instance.all_logs(result.run_id, of_type=DagsterEventType.STEP_FAILURE)
    error = record.dagster_event.step_failure_data.error  # type: ignore[union-attr]
    assert error.cls_name == kind
    assert error.message.startswith(f"k8s_ai_orchestrator.errors.{kind}: step '{step}'")
    assert f"- {kind}: step '{step}'" in run_error
    assert_nothing_submitted(emulator, instance, result.run_id)


def test_a_bad_slurm_section_refuses_a_run_without_gang_steps_at_executor_start(
    emulator: Any, instance: DagsterInstance, tmp_path: Path
) -> None:
    config = base_config(emulator)
    config["slurm"] = {"partition": "gpu;rm -rf /"}
    recon = build_reconstructable_job(
        __name__,
        bad_run_job.__name__,
        reconstructable_args=(json.dumps({"tiles": {"tags": SMALL}}),),
    )

    with pytest.raises(ConfigError) as refused:
        execute_job(recon, instance=instance, run_config={"execution": {"config": config}})

    assert str(refused.value).startswith(
        "slurm.partition='gpu;rm -rf /' is not a Slurm name: use letters, digits"
    )
    (run,) = instance.get_runs()
    assert_nothing_submitted(emulator, instance, run.run_id)
