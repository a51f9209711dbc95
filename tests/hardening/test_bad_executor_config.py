"""Every bad `ai_executor` config value is refused before anything runs, with the key path,
the value, what is allowed and the fix in the message.

Each case goes the way a launched run goes: Dagster validates the run config against
`ai_executor`'s schema (types, enums, unknown keys — refused before the run is stored), then
`ExecutorSettings.from_config` checks the values at executor start, before any backend is
built. A few cases run a real one-step job to show that no step was launched.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from dagster import (
    DagsterEventType,
    DagsterInstance,
    DagsterInvalidConfigError,
    execute_job,
    validate_run_config,
)
from dagster._core.definitions.reconstruct import ReconstructableRepository

from k8s_ai_orchestrator.backends.kubernetes.config import KubernetesConfig
from k8s_ai_orchestrator.backends.slurm.config import config_from_mapping
from k8s_ai_orchestrator.errors import ConfigError
from k8s_ai_orchestrator.launch.settings import ExecutorSettings
from k8s_ai_orchestrator.spec import resolve_spec

ROOT = Path(__file__).parents[2]
JOBS = ReconstructableRepository.for_module("tests.local.jobs", "defs", working_directory=str(ROOT))
ONE_STEP_JOB = "oom"  # one op, compute(cpu=1, memory="256Mi")

REST = {"transport": "rest", "rest_url": "http://slurm:6820", "rest_user": "ml"}
TENANT = {"kubeconfig": "/secrets/a.kubeconfig"}
KUBECONFIG_TEXT = "apiVersion: v1\nkind: Config\nusers:\n- name: a\n  user: {token: abc}\n"


def settings_at_run_start(executor_config: dict[str, Any]) -> ExecutorSettings:
    """What a launched run does with its executor config before it builds any backend: the
    schema check at launch, the value check at executor start, and the parse of the backend
    sections by the run-start pass (`executor/validation.py`, `make_backend`)."""
    job = JOBS.get_reconstructable_job(ONE_STEP_JOB).get_definition()
    processed = validate_run_config(job, {"execution": {"config": executor_config}})
    settings = ExecutorSettings.from_config(processed["execution"]["ai_executor"])
    if settings.kubernetes is not None:
        KubernetesConfig.from_dict(settings.kubernetes)
    if settings.slurm is not None:
        config_from_mapping(settings.slurm)
    return settings


# (id, executor config, error type, parts of the message)
SCHEMA_CASES = [
    ("backend-unknown", {"backend": "gcp"}, ["backend", "gcp"]),
    ("local-oversize-unknown", {"local": {"oversize": "skip"}}, ["oversize", "skip"]),
    ("local-start-method-fork", {"local": {"start_method": "fork"}}, ["start_method", "fork"]),
    ("local-unknown-key", {"local": {"cpu": 2}}, ["cpu", "local"]),
    ("local-cpus-text", {"local": {"cpus": "many"}}, ["cpus"]),
    ("oom-factor-text", {"oom_escalation": {"factor": "two"}}, ["factor"]),
    ("oom-max-attempts-float", {"oom_escalation": {"max_attempts": 2.5}}, ["max_attempts"]),
    ("size-classes-null-row", {"size_classes": {"xl": None}}, ["size_classes", "xl"]),
    ("kubernetes-unknown-key", {"kubernetes": {"imagee": "x"}}, ["imagee"]),
    ("kubernetes-api-retries-text", {"kubernetes": {"api_retries": "four"}}, ["api_retries"]),
    ("kubernetes-watch-timeout-float", {"kubernetes": {"watch_timeout_s": 2.5}}, ["watch_timeout"]),
    (
        "kubernetes-tenant-unknown-key",
        {"kubernetes": {"tenants": {"a": {"kubeconfg": "/k"}}}},
        ["kubeconfg"],
    ),
    ("kubernetes-labels-not-text", {"kubernetes": {"labels": {"team": 3}}}, ["labels"]),
    ("kubernetes-gpus-unknown-key", {"kubernetes": {"gpus": {"count": 2}}}, ["count"]),
    (
        "kubernetes-tenant-gpus-unknown-key",
        {"kubernetes": {"tenants": {"a": {**TENANT, "gpus": {"mode": "dra"}}}}},
        ["mode"],
    ),
    ("slurm-transport-unknown", {"slurm": {"transport": "ssh"}}, ["transport", "ssh"]),
    ("slurm-unknown-key", {"slurm": {"partitions": "gpu"}}, ["partitions"]),
    (
        "slurm-literal-rest-token",
        {"slurm": {**REST, "rest_token": "eyJhbGciOiJIUzI1NiJ9.s3cr3t"}},
        ["rest_token", "env"],
    ),
    ("slurm-grace-text", {"slurm": {"grace_period_s": "soon"}}, ["grace_period_s"]),
]


@pytest.mark.parametrize(
    ("config", "parts"), [c[1:] for c in SCHEMA_CASES], ids=[c[0] for c in SCHEMA_CASES]
)
def test_wrong_types_and_unknown_keys_are_refused_by_the_schema_at_launch(
    config: dict[str, Any], parts: list[str]
) -> None:
    with pytest.raises(DagsterInvalidConfigError) as refused:
        settings_at_run_start(config)
    message = str(refused.value)
    for part in parts:
        assert part in message
    assert "s3cr3t" not in message


# (id, executor config, parts of the message)
VALUE_CASES = [
    (
        "kubernetes-gpus-dra-without-device-class",
        {"kubernetes": {"gpus": {"request": "dra"}}},
        ["kubernetes.gpus", "device_class"],
    ),
    (
        "kubernetes-gpus-request-unknown",
        {"kubernetes": {"tenants": {"a": {**TENANT, "gpus": {"request": "cdi"}}}}},
        ["kubernetes.tenants.a.gpus.request='cdi'"],
    ),
    ("oom-factor-nan", {"oom_escalation": {"factor": math.nan}}, ["oom_escalation.factor=nan"]),
    ("oom-factor-inf", {"oom_escalation": {"factor": math.inf}}, ["oom_escalation.factor=inf"]),
    ("oom-factor-minus-inf", {"oom_escalation": {"factor": -math.inf}}, ["factor=-inf"]),
    ("oom-factor-one", {"oom_escalation": {"factor": 1.0}}, ["factor=1.0", "> 1"]),
    ("oom-factor-half", {"oom_escalation": {"factor": 0.5}}, ["factor=0.5", "> 1"]),
    ("oom-max-attempts-zero", {"oom_escalation": {"max_attempts": 0}}, ["max_attempts=0", ">= 1"]),
    ("oom-max-attempts-negative", {"oom_escalation": {"max_attempts": -2}}, ["max_attempts=-2"]),
    ("oom-max-memory-words", {"oom_escalation": {"max_memory": "lots"}}, ["max_memory", "lots"]),
    ("preemption-retries-negative", {"max_preemption_retries": -1}, ["max_preemption_retries=-1"]),
    ("grace-negative", {"grace_period_s": -1.0}, ["grace_period_s=-1.0", ">= 0"]),
    ("grace-nan", {"grace_period_s": math.nan}, ["grace_period_s=nan", "finite"]),
    ("grace-inf", {"grace_period_s": math.inf}, ["grace_period_s=inf"]),
    ("poll-negative", {"poll_interval_s": -1.0}, ["poll_interval_s=-1.0", "> 0"]),
    ("poll-zero", {"poll_interval_s": 0.0}, ["poll_interval_s=0.0", "> 0"]),
    ("poll-nan", {"poll_interval_s": math.nan}, ["poll_interval_s=nan"]),
    ("max-concurrent-zero", {"max_concurrent": 0}, ["max_concurrent=0", ">= 1"]),
    ("max-concurrent-negative", {"max_concurrent": -3}, ["max_concurrent=-3"]),
    ("local-cpus-zero", {"local": {"cpus": 0.0}}, ["local.cpus=0.0", "no capacity"]),
    ("local-cpus-negative", {"local": {"cpus": -2.0}}, ["local.cpus=-2.0"]),
    ("local-cpus-nan", {"local": {"cpus": math.nan}}, ["local.cpus=nan", "finite"]),
    ("local-cpus-inf", {"local": {"cpus": math.inf}}, ["local.cpus=inf", "finite"]),
    ("local-gpus-negative", {"local": {"gpus": -1}}, ["local.gpus=-1", ">= 0"]),
    ("local-memory-zero", {"local": {"memory": "0Gi"}}, ["local.memory='0Gi'"]),
    ("size-class-negative-cpu", {"size_classes": {"xl": {"cpu": -1}}}, ["size_classes", "xl"]),
    (
        "size-class-new-without-memory",
        {"size_classes": {"huge": {"cpu": 128}}},
        ["huge", "memory"],
    ),
    ("default-tenant-not-allowed", {"default_tenant": "b", "allowed_tenants": ["a"]}, ["'b'"]),
    ("tenant-name-invalid", {"allowed_tenants": ["Team A"]}, ["Team A"]),
    ("kubernetes-api-retries-negative", {"kubernetes": {"api_retries": -1}}, ["api_retries=-1"]),
    (
        "kubernetes-watch-timeout-zero",
        {"kubernetes": {"watch_timeout_s": 0}},
        ["kubernetes.watch_timeout_s=0", ">= 1"],
    ),
    (
        "kubernetes-backoff-zero",
        {"kubernetes": {"watch_reconnect_backoff_s": 0.0}},
        ["watch_reconnect_backoff_s=0.0", "> 0"],
    ),
    (
        "kubernetes-backoff-nan",
        {"kubernetes": {"watch_reconnect_backoff_s": math.nan}},
        ["watch_reconnect_backoff_s=nan"],
    ),
    (
        "kubernetes-pending-interval-negative",
        {"kubernetes": {"pending_events_interval_s": -5.0}},
        ["pending_events_interval_s=-5.0"],
    ),
    (
        "kubernetes-pending-interval-inf",
        {"kubernetes": {"pending_events_interval_s": math.inf}},
        ["pending_events_interval_s=inf"],
    ),
    (
        "kubernetes-tenant-without-access",
        {"kubernetes": {"tenants": {"a": {"namespace": "ml"}}}},
        ["kubernetes.tenants.a", "kubeconfig", "vcluster"],
    ),
    (
        "kubernetes-tenant-vcluster-without-namespace",
        {"kubernetes": {"tenants": {"a": {"vcluster": "a"}}}},
        ["host_namespace", "vcluster-a"],
    ),
    (
        "kubernetes-kubeconfig-contents",
        {"kubernetes": {"tenants": {"a": {"kubeconfig": KUBECONFIG_TEXT}}}},
        ["kubernetes.tenants.a.kubeconfig", "contents, not a path", "file"],
    ),
    (
        "kubernetes-secret-env-literal",
        {"kubernetes": {"env_vars": ["AWS_SECRET_ACCESS_KEY=abc"]}},
        ["AWS_SECRET_ACCESS_KEY", "env_secrets"],
    ),
    (
        "kubernetes-secret-env-copied",
        {"kubernetes": {"env_vars": ["HF_TOKEN"]}},
        ["HF_TOKEN", "env_secrets"],
    ),
    (
        "kubernetes-gpu-type-label-not-a-label-key",
        {"kubernetes": {"gpu_type_label": "bad label!"}},
        ["kubernetes.gpu_type_label='bad label!'", "a label key", "nvidia.com/gpu.product"],
    ),
    (
        "kubernetes-security-context-user-name",
        {"kubernetes": {"security_context": {"runAsUser": "root"}}},
        ["kubernetes.security_context.runAsUser='root'", "a whole number"],
    ),
    (
        "kubernetes-security-context-unknown-field",
        {"kubernetes": {"security_context": {"runAsUsr": 1000}}},
        ["kubernetes.security_context", "['runAsUsr']", "runAsUser"],
    ),
    (
        "kubernetes-security-context-list-as-text",
        {"kubernetes": {"security_context": {"capabilities": {"drop": "ALL"}}}},
        ["kubernetes.security_context.capabilities={'drop': 'ALL'}", "Capabilities object"],
    ),
    (
        "kubernetes-security-context-flag-as-text",
        {"kubernetes": {"security_context": {"privileged": "yes"}}},
        ["kubernetes.security_context.privileged='yes'", "true or false"],
    ),
    ("slurm-grace-negative", {"slurm": {"grace_period_s": -1}}, ["slurm.grace_period_s=-1"]),
    (
        "slurm-command-timeout-zero",
        {"slurm": {"command_timeout_s": 0.0}},
        ["slurm.command_timeout_s=0.0", "> 0"],
    ),
    (
        "slurm-command-timeout-nan",
        {"slurm": {"command_timeout_s": math.nan}},
        ["slurm.command_timeout_s=nan"],
    ),
    ("slurm-time-limit-zero", {"slurm": {"time_limit": 0}}, ["slurm.time_limit=0"]),
    (
        "slurm-time-limit-zero-text",
        {"slurm": {"time_limit": "0"}},
        ["slurm.time_limit='0'", "at least one minute", "120"],
    ),
    (
        "slurm-time-limit-zero-clock",
        {"slurm": {"time_limit": "00:00:00"}},
        ["slurm.time_limit='00:00:00'", "at least one minute"],
    ),
    ("slurm-workdir-relative", {"slurm": {"workdir": "scratch"}}, ["slurm.workdir", "absolute"]),
    ("slurm-partition-spaces", {"slurm": {"partition": "gpu a"}}, ["slurm.partition"]),
    ("slurm-rest-without-token", {"slurm": REST}, ["rest_token", "SLURM_JWT"]),
    (
        "slurm-rest-token-env-unset",
        {"slurm": {**REST, "rest_token": {"env": "H2A_UNSET_JWT"}}},
        ["H2A_UNSET_JWT", "not set"],
    ),
    (
        "slurm-rest-token-env-name-unset",
        {"slurm": {**REST, "rest_token_env": "H2A_UNSET_JWT"}},
        ["H2A_UNSET_JWT", "not set"],
    ),
    (
        "slurm-rest-token-twice",
        {"slurm": {**REST, "rest_token": {"env": "A"}, "rest_token_env": "B"}},
        ["not both"],
    ),
]


@pytest.mark.parametrize(
    ("config", "parts"), [c[1:] for c in VALUE_CASES], ids=[c[0] for c in VALUE_CASES]
)
def test_bad_values_are_refused_at_executor_start_naming_key_value_and_fix(
    config: dict[str, Any], parts: list[str]
) -> None:
    with pytest.raises(ConfigError) as refused:
        settings_at_run_start(config)
    message = str(refused.value)
    for part in parts:
        assert part in message, message
    fixes = ("set ", "give", "use", "add", "put", "raise", "export", "fix")
    assert any(word in message for word in fixes), message


def test_the_slurm_section_is_checked_at_executor_start_whatever_the_steps() -> None:
    with pytest.raises(ConfigError) as refused:
        ExecutorSettings.from_config({"backend": "local", "slurm": {"partition": "gpu;rm -rf /"}})
    assert str(refused.value).startswith(
        "slurm.partition='gpu;rm -rf /' is not a Slurm name: use letters, digits"
    )


def test_size_classes_null_row_is_refused_by_settings_too() -> None:
    with pytest.raises(ConfigError, match=r"size_classes.xl=None is not allowed: give \{cpu"):
        ExecutorSettings.from_config({"size_classes": {"xl": None}})


def test_a_missing_log_dir_is_created_at_executor_start(tmp_path: Path) -> None:
    log_dir = tmp_path / "not" / "yet"
    settings_at_run_start({"local": {"log_dir": str(log_dir)}})
    assert log_dir.is_dir()


def test_a_log_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    a_file = tmp_path / "logs"
    a_file.write_text("")
    with pytest.raises(ConfigError, match="exists and is not a directory"):
        settings_at_run_start({"local": {"log_dir": str(a_file)}})


def test_a_step_above_max_memory_is_refused_naming_step_memory_and_cap() -> None:
    settings = settings_at_run_start({"oom_escalation": {"max_memory": "4Gi"}})
    with pytest.raises(ConfigError) as refused:
        settings.check_memory_cap("mosaic", resolve_spec({"cpu": 2, "memory": "8Gi"}))
    assert str(refused.value) == (
        "step 'mosaic' declares 8Gi of memory, more than oom_escalation.max_memory=4Gi, the "
        "most this executor may ask for: raise oom_escalation.max_memory to at least 8Gi or "
        "give the step less with compute(memory=...)"
    )
    settings.check_memory_cap("tiles", resolve_spec({"cpu": 1, "memory": "4Gi"}))


def test_valid_typed_configs_of_every_section_are_accepted() -> None:
    settings = settings_at_run_start(
        {
            "backend": "kubernetes",
            "default_tenant": "a",
            "local": {"cpus": 2, "oversize": "fail", "start_method": "forkserver"},
            "kubernetes": {
                "image": "ghcr.io/acme/p:1",
                "image_pull_policy": "Always",
                "api_retries": 0,
                "tenants": {"a": TENANT, "b": {"vcluster": "b", "host_namespace": "vc-b"}},
                "env_vars": ["DAGSTER_HOME=/d", "PYTHONPATH"],
            },
            "slurm": {"transport": "cli", "partition": "gpu", "time_limit": "1-00:00:00"},
            "oom_escalation": {"factor": 1.5, "max_memory": "64Gi", "max_attempts": 3},
            "max_concurrent": 4,
        }
    )
    assert settings.backend == "kubernetes"
    assert settings.relaunch.oom.factor == 1.5
    assert settings.max_concurrent == 4


def start_events(instance: DagsterInstance, run_id: str) -> list[Any]:
    return list(instance.all_logs(run_id, of_type=DagsterEventType.STEP_START))


def run_one_step_job(instance: DagsterInstance, executor_config: dict[str, Any]) -> Any:
    return execute_job(
        JOBS.get_reconstructable_job(ONE_STEP_JOB),
        instance=instance,
        run_config={"execution": {"config": executor_config}},
        raise_on_error=False,
    )


def failure_text(instance: DagsterInstance, run_id: str) -> str:
    return "\n".join(
        str(record.dagster_event.event_specific_data)
        for record in instance.all_logs(run_id)
        if record.dagster_event is not None and record.dagster_event.is_failure
    ) + "\n".join(
        record.dagster_event.message or ""
        for record in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT)
        if record.dagster_event is not None
    )


@pytest.mark.timeout(300)
def test_nan_oom_factor_is_refused_when_the_run_starts_and_launches_no_step(
    instance: DagsterInstance, test_out: Path
) -> None:
    with pytest.raises(ConfigError, match=r"oom_escalation.factor=nan is not allowed"):
        run_one_step_job(instance, {"oom_escalation": {"factor": math.nan}})
    assert all(start_events(instance, run.run_id) == [] for run in instance.get_runs())
    assert not (test_out / "events.jsonl").exists()


@pytest.mark.timeout(300)
def test_a_step_above_max_memory_fails_the_run_before_any_step_is_launched(
    instance: DagsterInstance, test_out: Path
) -> None:
    result = run_one_step_job(instance, {"oom_escalation": {"max_memory": "128Mi"}})
    assert not result.success
    assert start_events(instance, result.run_id) == []
    assert not (test_out / "events.jsonl").exists()
    assert "more than oom_escalation.max_memory=128Mi" in failure_text(instance, result.run_id)


@pytest.mark.timeout(300)
def test_a_bad_slurm_partition_refuses_a_run_without_gang_steps_and_launches_nothing(
    instance: DagsterInstance, test_out: Path
) -> None:
    with pytest.raises(ConfigError, match=r"slurm.partition='gpu;rm -rf /' is not a Slurm name"):
        run_one_step_job(instance, {"slurm": {"partition": "gpu;rm -rf /"}})
    assert all(start_events(instance, run.run_id) == [] for run in instance.get_runs())
    assert not (test_out / "events.jsonl").exists()
