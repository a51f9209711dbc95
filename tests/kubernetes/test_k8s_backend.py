"""The Kubernetes backend on the emulated cluster: what a user sees for each way a step ends."""

from __future__ import annotations

import logging
import uuid
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from k8s_support import (
    NAMESPACE,
    TENANTS,
    python_step,
    running_pod,
    tenant_config,
    wait_terminal,
    wait_until,
)
from kubernetes.client import CoreV1Api

from k8s_ai_orchestrator.backends.base import FailureReason, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig, prepare
from k8s_ai_orchestrator.backends.kubernetes.status import SETTLE_S
from k8s_ai_orchestrator.errors import BackendError, SubmitError, TenantAccessError
from k8s_ai_orchestrator.launch.lifecycle import Attempt, Verdict
from k8s_ai_orchestrator.testing.kube.emulator import wait_until as wait_for
from tests.support import FakeClock

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(180)]

SLEEPER = "import time; print('started', flush=True); time.sleep(120)"


def another_backend(emu: Any, clock: FakeClock) -> KubernetesBackend:
    """A second backend on the same tenants, as the `backend` fixture's (close it)."""
    return KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emu)),
        allowed_tenants=TENANTS,
        default_tenant="team-a",
        clock=clock,
        sleep=lambda s: None,
    )


def jobs_and_pods(emu: Any, tenant: str, run_id: str) -> list[Any]:
    def of_run(objects: list[Any]) -> list[Any]:
        return [
            o for o in objects if o["metadata"].get("labels", {}).get("k8s-ai/run-id") == run_id
        ]

    return of_run(emu.jobs(tenant, NAMESPACE)) + of_run(emu.pods(tenant, NAMESPACE))


def test_step_runs_in_its_tenant_and_its_output_is_readable(
    emulator: Any, backend: KubernetesBackend
) -> None:
    request = python_step("print('tile 7 done')", tenant="team-b")
    handle = backend.submit(request)
    status = wait_terminal(emulator, backend, handle)
    assert status.state == StepState.SUCCEEDED
    assert status.node in {"node-a", "node-b"}
    assert "tile 7 done" in backend.logs(handle)
    assert jobs_and_pods(emulator, "team-a", request.run_id) == []
    assert len(emulator.jobs("team-b", NAMESPACE)) >= 1


def test_step_exceeding_its_memory_limit_reports_oom_killed(
    emulator: Any, backend: KubernetesBackend
) -> None:
    hog = "import time; blocks = [bytearray(16 << 20) for _ in range(40)]; time.sleep(30)"
    handle = backend.submit(python_step(hog, memory="128Mi"))
    status = wait_terminal(emulator, backend, handle)
    assert (status.reason, status.exit_code) == (FailureReason.OOM_KILLED.value, 137)
    assert "128Mi" in status.message


def test_eviction_mid_step_reports_evicted(emulator: Any, backend: KubernetesBackend) -> None:
    handle = backend.submit(python_step(SLEEPER, grace_period_s=1))
    emulator.evict_pod("team-a", NAMESPACE, running_pod(emulator, backend, handle))
    status = wait_terminal(emulator, backend, handle)
    assert status.reason == FailureReason.EVICTED.value


def test_preemption_by_the_scheduler_reports_preempted(
    emulator: Any, backend: KubernetesBackend
) -> None:
    handle = backend.submit(python_step(SLEEPER, preemptible=True, grace_period_s=1))
    emulator.preempt_pod("team-a", NAMESPACE, running_pod(emulator, backend, handle))
    status = wait_terminal(emulator, backend, handle)
    assert status.reason == FailureReason.PREEMPTED.value


def test_cancel_deletes_the_job_and_its_pod(emulator: Any, backend: KubernetesBackend) -> None:
    request = python_step(SLEEPER, grace_period_s=1)
    handle = backend.submit(request)
    running_pod(emulator, backend, handle)
    backend.cancel(handle)
    backend.cancel(handle)  # idempotent
    assert backend.status(handle).reason == FailureReason.CANCELLED.value
    emulator.wait_for(lambda: jobs_and_pods(emulator, "team-a", request.run_id) == [], timeout=60)


def test_unschedulable_step_is_pending_with_the_scheduler_reason_then_fails_after_its_timeout(
    emulator: Any, backend: KubernetesBackend, clock: FakeClock
) -> None:
    # Fits a node's allocatable (pre-flight passes) but both nodes are busy with 6 of 8 CPUs.
    blockers = [
        backend.submit(python_step(SLEEPER, step=f"blocker-{i}", cpu=6, grace_period_s=1))
        for i in range(2)
    ]
    for blocker in blockers:
        running_pod(emulator, backend, blocker)
    handle = backend.submit(python_step("pass", step="mosaic", cpu=4, timeout=600))
    attempt = Attempt(handle, clock(), "kubernetes tenant 'team-a'", timeout_s=600)
    pending = wait_until(emulator, backend, handle, lambda s: bool(s.waiting))
    assert pending.state == StepState.PENDING
    assert "Insufficient cpu" in pending.message
    attempt.observe(pending, clock())
    clock.advance(601)
    seen = attempt.observe(backend.status(handle), clock())  # the step's observer gives up
    assert seen.verdict is Verdict.GIVE_UP
    assert seen.status.reason == FailureReason.UNSCHEDULABLE.value
    assert "Insufficient cpu" in seen.status.message
    assert "stayed Pending for more than 600s" in seen.status.message
    backend.cancel(handle)
    for blocker in blockers:
        backend.cancel(blocker)


def test_step_larger_than_the_tenant_quota_fails_in_pre_flight(
    emulator: Any, backend: KubernetesBackend
) -> None:
    quota = {
        "metadata": {"name": "k8s-ai-steps"},
        "spec": {"hard": {"requests.memory": "1Gi", "requests.cpu": "4"}},
    }
    core = CoreV1Api(emulator.tenant("team-b").api_client())
    core.create_namespaced_resource_quota(NAMESPACE, quota)
    try:
        with pytest.raises(SubmitError) as refused:
            backend.submit(python_step("pass", step="mosaic", tenant="team-b", memory="2Gi"))
        message = str(refused.value)
        for part in (
            "'mosaic'",
            "'team-b'",
            "requests.memory=2Gi",
            "allows 1Gi",
            "policies.resourceQuota",
        ):
            assert part in message
    finally:
        core.delete_namespaced_resource_quota("k8s-ai-steps", NAMESPACE)


def test_step_larger_than_any_node_fails_in_pre_flight(
    emulator: Any, backend: KubernetesBackend
) -> None:
    with pytest.raises(
        SubmitError, match=r"'xl'.*no schedulable node.*cpu \(needs 72, largest 8\)"
    ):
        backend.submit(python_step("pass", step="xl", cpu=72, memory="4Gi"))


def test_a_step_cannot_reach_a_tenant_outside_the_allowlist(emulator: Any) -> None:
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emulator)), allowed_tenants=["team-a"]
    )
    emulator.reset_request_counts()
    try:
        with pytest.raises(TenantAccessError, match=r"'embed'.*'team-b'.*\['team-a'\]"):
            backend.submit(python_step("pass", step="embed", tenant="team-b"))
    finally:
        backend.close()
    assert sum(emulator.request_counts(server="team-b").values()) == 0


def test_status_is_served_from_the_watch_without_api_requests(
    emulator: Any, backend: KubernetesBackend
) -> None:
    handle = backend.submit(python_step("print('ok')"))
    wait_terminal(emulator, backend, handle)
    emulator.reset_request_counts()
    for _ in range(200):
        backend.status(handle)
    assert sum(emulator.request_counts(server="team-a").values()) == 0


def test_api_errors_resets_and_expired_watches_do_not_lose_status(
    emulator: Any, backend: KubernetesBackend
) -> None:
    emulator.inject_errors("team-a", status=429, count=2, verb="create")
    work = "import time; time.sleep(3); print('done', flush=True)"
    handles = [backend.submit(python_step(work, step=f"tile-{i}", cpu=0.25)) for i in range(3)]
    running_pod(emulator, backend, handles[0])
    emulator.inject_errors("team-a", status=500, count=3)
    emulator.reset_connections("team-a", count=2)
    emulator.expire_watches("team-a")
    for handle in handles:
        assert wait_terminal(emulator, backend, handle).state == StepState.SUCCEEDED


def test_no_token_or_kubeconfig_reaches_logs_or_errors(
    emulator: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secrets = [emulator.tenant(t).token for t in ("team-a", "team-b")]
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emulator)), allowed_tenants=["team-a"]
    )
    errors: list[str] = []
    try:
        for attempt in (
            lambda: backend.submit(python_step("pass", tenant="team-b")),
            lambda: backend.submit(python_step("pass", cpu=72)),
        ):
            with pytest.raises(SubmitError) as refused:
                attempt()
            errors.append(str(refused.value))
        emulator.inject_errors("team-a", status=500, count=2)
        emulator.expire_watches("team-a")
        handle = backend.submit(python_step("print('ok')"))
        wait_terminal(emulator, backend, handle)
    finally:
        backend.close()
    misplaced = {
        "vcluster": "team-b",
        "host_namespace": "vcluster-elsewhere",
        "host_kubeconfig": emulator.host.kubeconfig_path,
    }
    raw = tenant_config(emulator, tenants={"team-b": misplaced})
    vcluster_backend = KubernetesBackend(KubernetesConfig.from_dict(raw), sleep=lambda s: None)
    try:
        with pytest.raises(SubmitError, match="cannot read secret vc-team-b") as refused:
            vcluster_backend.submit(python_step("pass", tenant="team-b"))
        errors.append(str(refused.value))
    finally:
        vcluster_backend.close()
    secrets.append(emulator.host.token)
    for secret in secrets:
        assert secret not in caplog.text
        assert all(secret not in error for error in errors)


def test_a_missing_secret_fails_the_step_at_once_and_removes_its_job(emulator: Any) -> None:
    raw = tenant_config(emulator, env_secrets=["pipeline-credentials"])
    backend = KubernetesBackend(KubernetesConfig.from_dict(raw), sleep=lambda s: None)
    request = python_step("pass")
    try:
        handle = backend.submit(request)
        status = wait_terminal(emulator, backend, handle)
        assert status.reason == FailureReason.CONFIG_ERROR.value
        assert "pipeline-credentials" in status.message
        emulator.wait_for(
            lambda: jobs_and_pods(emulator, "team-a", request.run_id) == [], timeout=60
        )
    finally:
        backend.close()


def test_a_step_waiting_for_quota_is_pending_with_the_quota_error(
    emulator: Any, backend: KubernetesBackend
) -> None:
    quota = {"metadata": {"name": "tight"}, "spec": {"hard": {"requests.cpu": "1"}}}
    core = CoreV1Api(emulator.tenant("team-b").api_client())
    core.create_namespaced_resource_quota(NAMESPACE, quota)
    run_id = "quota-run"
    try:
        first = backend.submit(python_step(SLEEPER, tenant="team-b", run_id=run_id, cpu=0.75))
        running_pod(emulator, backend, first)
        second = backend.submit(
            python_step("pass", step="tile-2", tenant="team-b", run_id=run_id, cpu=0.75)
        )
        status = wait_until(emulator, backend, second, lambda s: bool(s.waiting))
        assert status.state == StepState.PENDING
        assert "exceeded quota" in status.message
        backend.cancel(first)
        assert wait_terminal(emulator, backend, second).state == StepState.SUCCEEDED
    finally:
        core.delete_namespaced_resource_quota("tight", NAMESPACE)


@pytest.mark.parametrize("exit_code", [0, 3])
def test_a_job_adopted_after_its_pod_ended_is_read_from_the_pod_at_the_first_look(
    emulator: Any, backend: KubernetesBackend, clock: FakeClock, exit_code: int
) -> None:
    """A resumed run worker's backend lists the run's pods before `adopt` returns, so its
    first `status` is the pod's exit, never the Job's summary of it (the pod watch's first
    ADDED events may still be on their way)."""
    request = python_step(f"import sys; sys.exit({exit_code})", step=f"exits-{exit_code}")
    backend.submit(request)

    def ended() -> bool:
        pods = [p for p in emulator.pods("team-a", NAMESPACE) if request.run_id in str(p)]
        return any((p.get("status") or {}).get("phase") in ("Succeeded", "Failed") for p in pods)

    wait_for(ended, 60, 0.1)
    fresh = another_backend(emulator, clock)  # a resumed run worker's
    try:
        handle = fresh.adopt(request)
        assert handle is not None
        status = fresh.status(handle)
        assert status.is_terminal and status.exit_code == exit_code, status
    finally:
        fresh.close()


def test_a_resumed_backend_finds_every_job_of_the_run_in_one_list(
    emulator: Any, backend: KubernetesBackend, clock: FakeClock
) -> None:
    """Adopting a run's steps costs one list of the run's Jobs, not a read per step."""
    run_id = str(uuid.uuid4())
    requests = [python_step(SLEEPER, step=f"tile-{i}", run_id=run_id) for i in range(3)]
    handles = [backend.submit(request) for request in requests]
    fresh = another_backend(emulator, clock)  # a resumed run worker's
    emulator.reset_request_counts()
    try:
        adopted = [fresh.adopt(request) for request in requests]
        assert all(handle is not None for handle in adopted)
        assert fresh.adopt(python_step("pass", step="never", run_id=run_id)) is None
        counts = emulator.request_counts("team-a")
        assert (counts[("list", "jobs")], counts[("get", "jobs")]) == (1, 0)
    finally:
        fresh.close()
        for handle in handles:
            backend.cancel(handle)


def test_a_job_the_api_server_refuses_is_a_submit_error_with_the_server_s_words(
    emulator: Any, backend: KubernetesBackend
) -> None:
    """The create's answer is not read into a model (`_preload_content=False`); a refusal
    still comes back as the server said it."""
    emulator.inject_errors("team-a", status=403, count=1, verb="create", path_regex=r"/jobs$")
    with pytest.raises(SubmitError) as refused:
        backend.submit(python_step("pass", step="tiles"))
    message = str(refused.value)
    assert "step 'tiles': tenant 'team-a' refused Job k8s-ai-" in message, message
    assert "403" in message, message
    handle = backend.submit(python_step("print('created')", step="tiles2"))
    assert wait_for(lambda: backend.status(handle).is_terminal, 60, 0.1)
    assert backend.status(handle).state is StepState.SUCCEEDED


SIGKILLED = "import os, signal; print('started', flush=True); os.kill(os.getpid(), signal.SIGKILL)"


def _sigkilled_pod(emulator: Any, backend: KubernetesBackend, handle: Any) -> tuple[str, float]:
    """The step's pod once its process died of SIGKILL, and when it ended (epoch seconds)."""

    def failed() -> Any:
        pods = [
            p
            for p in emulator.pods("team-a", NAMESPACE)
            if p["metadata"]["labels"].get("k8s-ai/job") == handle.job_id
            and (p.get("status") or {}).get("phase") == "Failed"
        ]
        return pods[0] if pods else None

    pod = wait_for(failed, 60, 0.1)
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("Error", 137)
    ended = datetime.fromisoformat(terminated["finishedAt"]).timestamp()
    return pod["metadata"]["name"], ended


def _walled_backend(emulator: Any, clock: FakeClock, now: list[float]) -> KubernetesBackend:
    """A backend whose epoch clock reads `now[0]` (close it)."""
    return KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emulator)),
        allowed_tenants=TENANTS,
        clock=clock,
        sleep=lambda s: None,
        wall=lambda: now[0],
    )


def test_a_sigkill_the_kubelet_later_says_was_an_oom_kill_is_read_as_oom_killed(
    emulator: Any, clock: FakeClock
) -> None:
    """The kubelet can write `Error`, exit 137, before `OOMKilled` (the OOM event comes after
    the exit): a SIGKILLed container with a memory limit is decided only once that settles."""
    now = [0.0]
    backend = _walled_backend(emulator, clock, now)
    try:
        handle = backend.submit(python_step(SIGKILLED, memory="128Mi"))
        pod, ended = _sigkilled_pod(emulator, backend, handle)
        now[0] = ended + 1.0
        assert backend.status(handle).state == StepState.RUNNING  # not decided yet

        # The kubelet's late write: the whole list (containerStatuses is atomic, not merged).
        (listed,) = [p for p in emulator.pods("team-a", NAMESPACE) if p["metadata"]["name"] == pod]
        statuses = listed["status"]["containerStatuses"]
        statuses[0]["state"]["terminated"]["reason"] = "OOMKilled"
        body = {"status": {"containerStatuses": statuses}}
        core = CoreV1Api(emulator.tenant("team-a").api_client())
        core.patch_namespaced_pod_status(pod, NAMESPACE, body)
        status = wait_terminal(emulator, backend, handle)
        assert (status.reason, status.exit_code) == (FailureReason.OOM_KILLED.value, 137)
    finally:
        backend.close()


def test_a_sigkill_nobody_explains_is_an_error_once_the_oom_settle_time_passed(
    emulator: Any, clock: FakeClock
) -> None:
    now = [0.0]
    backend = _walled_backend(emulator, clock, now)
    try:
        handle = backend.submit(python_step(SIGKILLED, memory="128Mi"))
        _, ended = _sigkilled_pod(emulator, backend, handle)
        now[0] = ended + SETTLE_S
        status = wait_terminal(emulator, backend, handle)  # once the backend's watch saw it end
        assert (status.reason, status.exit_code) == (FailureReason.ERROR.value, 137)
    finally:
        backend.close()


def test_validation_builds_one_job_per_step_shape_and_still_refuses_a_bad_one(
    emulator: Any, backend: KubernetesBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The executor validates every step before the first submit: alike steps (same tenant,
    size, tags and environment names) are checked with one built Job; a step whose tag
    differs is built and refused on its own; a submit builds its own Job."""
    built: list[str] = []
    real_build = prepare.build_job

    def counting(request: Any, *rest: Any) -> Any:
        built.append(request.step_key)
        return real_build(request, *rest)

    monkeypatch.setattr(prepare, "build_job", counting)
    for n in range(3):
        backend.validate(python_step("pass", step=f"tile-{n}"))
    assert built == ["tile-0"]
    bad_tag = {"dagster-k8s/config": '{"container_config": {"resources": 5}'}
    with pytest.raises(SubmitError, match="step 'odd'.*dagster-k8s/config"):
        backend.validate(replace(python_step("pass", step="odd"), labels=bad_tag))
    backend.cancel(backend.submit(python_step("pass", step="tile-1")))
    assert built == ["tile-0", "odd", "tile-1"]


def test_a_released_step_leaves_nothing_behind_in_the_backend_and_other_steps_are_untouched(
    emulator: Any, backend: KubernetesBackend
) -> None:
    run_id = str(uuid.uuid4())
    failed = backend.submit(python_step("import sys; sys.exit(3)", run_id=run_id))
    assert wait_terminal(emulator, backend, failed).state == StepState.FAILED
    last = backend.submit(python_step("print('tile 9 done')", run_id=run_id, attempt=1))
    assert wait_terminal(emulator, backend, last).state == StepState.SUCCEEDED
    assert "tile 9 done" in backend.logs_since(last)[0]
    other = backend.submit(python_step(SLEEPER, step="other", run_id=run_id, grace_period_s=1))
    running_pod(emulator, backend, other)
    watch = backend._attempts.of(last).watch

    backend.release(last)  # the executor is done with step "tiles": both its attempts go

    for handle in (failed, last):
        with pytest.raises(BackendError, match="not submitted by this backend"):
            backend.status(handle)
        assert watch.pods(handle.job_id) == [] and watch.deleted_pods(handle.job_id) == []
    assert backend.resizes(last) == () and backend._logs.report(last.job_id) is None
    backend.cancel(failed)  # a released attempt's Job is still reached; its pod's deletion...
    emulator.wait_for(lambda: not pods_of(emulator, failed.job_id), timeout=60)
    assert watch.pods(failed.job_id) == [] and watch.deleted(failed.job_id) is None  # ...unseen
    assert backend.status(other).state == StepState.RUNNING
    backend.cancel(other)
    assert wait_terminal(emulator, backend, other).reason == FailureReason.CANCELLED.value


def pods_of(emu: Any, job: str) -> list[Any]:
    return [
        p for p in emu.pods("team-a", NAMESPACE) if p["metadata"]["labels"].get("k8s-ai/job") == job
    ]
