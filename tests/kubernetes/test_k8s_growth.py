"""`PodGrowth` against a recording stand-in for the API: when it reads node stats, when it
asks for a resize, and how it reads the outcome from the pod (no cluster needed); and the
backend on the emulator when the tenant refuses `get nodes/proxy`."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from k8s_support import TENANTS, python_step, tenant_config, wait_terminal
from kubernetes.client.exceptions import ApiException

from k8s_ai_orchestrator.backends.base import FailureReason, GrowOutcome
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.backends.kubernetes.api import ApiRetry
from k8s_ai_orchestrator.backends.kubernetes.growth import (
    VCLUSTER_SERVICE_FIX,
    PodGrowth,
    PodMemory,
    resizable,
)
from k8s_ai_orchestrator.launch.lifecycle import resize_message
from k8s_ai_orchestrator.memorygrowth import MemoryGrowth
from tests.support import FakeClock

MiB, GiB = 1024**2, 1024**3


class FakeCore:
    """Answers the node summary with `used` bytes for pod ns/p; records resizes."""

    def __init__(self, used: int, stats_error: int | None = None, resize_error: int | None = None):
        self.used, self.stats_error, self.resize_error = used, stats_error, resize_error
        self.stats_reads = 0
        self.stats_body: str | None = None  # the refusal's body, if any
        self.resizes: list[dict[str, Any]] = []

    def connect_get_node_proxy_with_path(self, node: str, path: str, **_: Any) -> Any:
        self.stats_reads += 1
        assert (node, path) == ("n1", "stats/summary")
        if self.stats_error:
            error = ApiException(status=self.stats_error, reason="Forbidden")
            error.body = self.stats_body
            raise error
        pod = {"podRef": {"namespace": "ns", "name": "p"}, "memory": {"workingSetBytes": self.used}}
        return SimpleNamespace(data=json.dumps({"pods": [pod]}).encode())

    def patch_namespaced_pod_resize(self, name: str, namespace: str, body: Any) -> Any:
        if self.resize_error:
            raise ApiException(status=self.resize_error, reason="Forbidden")
        self.resizes.append(body)
        return body


def pod(limit: str = "1Gi", pending: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {
        "containerStatuses": [{"name": "dagster", "resources": {"limits": {"memory": limit}}}]
    }
    if pending:
        status["conditions"] = [
            {"type": "PodResizePending", "status": "True", "reason": "Deferred", "message": pending}
        ]
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeName": "n1", "containers": [{"name": "dagster"}]},
        "status": status,
    }


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def growth(clock: FakeClock, policy: MemoryGrowth | None) -> PodGrowth:
    return PodGrowth(policy, ApiRetry(retries=0, sleep=clock.advance), clock, logging.getLogger())


POLICY = MemoryGrowth(grow_at=0.85, factor=2.0, max_memory_bytes=4 * GiB)


def memory(step: str = "run-1/tiles") -> PodMemory:
    """A fresh attempt of `step` with a 1Gi limit."""
    return PodMemory(limit_bytes=GiB, step=step)


def test_below_the_threshold_memory_is_measured_at_most_once_a_second(clock: FakeClock) -> None:
    core, state = FakeCore(used=500 * MiB), memory()
    grower = growth(clock, POLICY)
    for _ in range(5):
        grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
        clock.advance(0.3)
    assert core.stats_reads == 2 and state.peak_bytes == 500 * MiB and not core.resizes


def test_past_the_threshold_the_pod_is_resized_and_accepted_once_the_status_shows_it(
    clock: FakeClock,
) -> None:
    core, state = FakeCore(used=900 * MiB), memory()
    grower = growth(clock, POLICY)
    grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
    resources = core.resizes[0]["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"memory": "2048Mi"}, "limits": {"memory": "2048Mi"}}
    clock.advance(1.5)
    grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
    assert len(core.resizes) == 1 and state.resizes == []  # one resize in flight at a time
    grower.observe(core, "team-a", pod(limit="2Gi"), state)  # type: ignore[arg-type]
    (accepted,) = state.resizes
    assert (accepted.old_bytes, accepted.new_bytes) == (GiB, 2 * GiB)
    assert accepted.outcome is GrowOutcome.ACCEPTED and state.limit_bytes == 2 * GiB


def test_a_deferred_resize_is_reported_pending_once_then_accepted_when_the_node_has_room(
    clock: FakeClock,
) -> None:
    core, state = FakeCore(used=900 * MiB), memory()
    grower = growth(clock, POLICY)
    grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
    why = "Node didn't have enough resource: memory, requested: 2147483648, used: 1, capacity: 2"
    for _ in range(3):
        grower.observe(core, "team-a", pod(pending=why), state)  # type: ignore[arg-type]
    (pending,) = state.resizes
    assert pending.outcome is GrowOutcome.PENDING and pending.reason == f"Deferred: {why}"
    grower.observe(core, "team-a", pod(limit="2Gi"), state)  # type: ignore[arg-type]
    assert [r.outcome for r in state.resizes] == [GrowOutcome.PENDING, GrowOutcome.ACCEPTED]


def test_a_resize_the_tenant_forbids_is_refused_and_not_asked_again(clock: FakeClock) -> None:
    core, state = FakeCore(used=900 * MiB, resize_error=403), memory()
    grower = growth(clock, POLICY)
    for _ in range(3):
        grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
        clock.advance(1.5)
    (refused,) = state.resizes
    assert refused.outcome is GrowOutcome.REFUSED
    assert refused.reason == "the API server refused the resize (403 Forbidden)"


def test_a_step_whose_memory_climbs_slowly_grows_by_what_its_trend_needs(
    clock: FakeClock,
) -> None:
    # 700 MiB, then 10 MiB a second: past 85 % of 1Gi at 873 MiB, then 10 s more at that rate
    # is 973 MiB, which 1145 MiB keeps under the threshold: at least a quarter more, 1280Mi
    core, state = FakeCore(used=700 * MiB), memory()
    grower = growth(clock, POLICY)
    while not core.resizes:
        grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
        clock.advance(1.0)
        core.used += 10 * MiB
    resources = core.resizes[0]["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"memory": "1280Mi"}  # × 2 (2048Mi) without a trend


def test_a_size_the_node_cannot_take_is_not_asked_again_but_a_smaller_one_may_be(
    clock: FakeClock,
) -> None:
    core, state = FakeCore(used=900 * MiB, resize_error=422), memory()
    grower = growth(clock, POLICY)
    grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]  # 2Gi: no trend yet
    core.resize_error = None
    clock.advance(1.5)
    grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]  # flat: 1.25 ×
    refused = state.resizes[0]
    assert (refused.outcome, refused.new_bytes) == (GrowOutcome.REFUSED, 2 * GiB)
    assert [c["spec"]["containers"][0]["resources"]["limits"] for c in core.resizes] == [
        {"memory": "1280Mi"}
    ]


def test_without_node_stats_the_tenant_is_not_asked_again(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    core, state = FakeCore(used=900 * MiB, stats_error=403), memory()
    grower = growth(clock, POLICY)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
            clock.advance(1.5)
    assert core.stats_reads == 1 and not core.resizes
    assert caplog.text.count("cannot read node stats (403 Forbidden)") == 1
    assert "set rbac.nodeProxy: true" in caplog.text


def test_a_growing_step_without_node_stats_is_told_once_per_step_how_to_allow_them(
    clock: FakeClock,
) -> None:
    core, grower = FakeCore(used=900 * MiB, stats_error=403), growth(clock, POLICY)
    first, relaunched, other = memory(), memory(), memory("run-1/other")
    for state in (first, first, relaunched, other, other):
        grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
        clock.advance(1.5)
    (note,) = first.resizes
    assert relaunched.resizes == []  # the step's next attempt: said already
    assert [r.reason for r in other.resizes] == [note.reason]  # another step: its own note
    assert note.outcome is GrowOutcome.REFUSED and note.old_bytes == note.new_bytes == GiB
    assert "may not get nodes/proxy (403 Forbidden)" in note.reason
    assert "set rbac.nodeProxy: true in the tenant chart's values" in note.reason
    assert "exec-equivalent" in note.reason
    assert core.stats_reads == 1 and not core.resizes
    message = resize_message("tiles", note, grow_at=0.85)
    assert message.startswith("Cannot grow step 'tiles' in place: growing in place needs ")
    assert message.endswith("if it passes 1Gi it is OOMKilled and relaunched with more memory")


def test_a_vcluster_apiserver_s_refusal_names_its_service_not_rbac(clock: FakeClock) -> None:
    """The answer of a vCluster's own API server to `nodes/<node>/proxy/stats/summary`, seen
    on the real v1.37 apiserver behind the real vCluster v0.34 syncer (tests/vcluster/README):
    the fix is the kubeconfig's address, not `rbac.nodeProxy`."""
    core, state = FakeCore(used=900 * MiB, stats_error=403), memory()
    core.stats_body = json.dumps(
        {
            "message": 'forbidden: User "kube-apiserver-kubelet-client" cannot get path '
            '"/stats/summary"'
        }
    )
    growth(clock, POLICY).observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
    (note,) = state.resizes
    assert "did not proxy to the node's kubelet" in note.reason
    assert note.reason.endswith(VCLUSTER_SERVICE_FIX)
    assert "rbac.nodeProxy" not in note.reason


def test_a_step_only_measured_gets_no_growth_note_without_node_stats(clock: FakeClock) -> None:
    core, state = FakeCore(used=900 * MiB, stats_error=403), memory()
    growth(clock, None).observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
    assert state.resizes == [] and state.peak_bytes == 0


def test_on_a_tenant_refusing_node_proxy_a_growing_step_is_noted_and_oom_killed(
    emulator: Any, clock: FakeClock
) -> None:
    """The emulator answers `get nodes/proxy` with 403, as a tenant installed with the chart's
    default values (rbac.nodeProxy: false) does: a step that does not report its own memory
    (a raw command) gets one note, then its OOM."""
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emulator)),
        allowed_tenants=TENANTS,
        clock=clock,
        sleep=lambda s: None,
        growth=MemoryGrowth(grow_at=0.5, factor=2.0, max_memory_bytes=GiB),
    )
    hog = "import time; blocks = [bytearray(16 << 20) for _ in range(40)]; time.sleep(30)"
    emulator.set_permission("team-a", "get", "nodes/proxy", allowed=False)
    try:
        step = python_step(f"import time; time.sleep(1); {hog}", memory="128Mi")
        handle = backend.submit(replace(step, raw_command=True))  # its argv as it is: no reports
        status = wait_terminal(emulator, backend, handle)
        (note,) = backend.resizes(handle)
    finally:
        emulator.set_permission("team-a", "get", "nodes/proxy", allowed=True)
        backend.close()
    assert (status.reason, status.exit_code) == (FailureReason.OOM_KILLED.value, 137)
    assert note.outcome is GrowOutcome.REFUSED and note.new_bytes == note.old_bytes
    assert "403 Forbidden" in note.reason and "rbac.nodeProxy: true" in note.reason


def test_without_a_policy_memory_is_measured_but_never_grown(clock: FakeClock) -> None:
    core, state = FakeCore(used=1000 * MiB), memory()
    growth(clock, None).observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
    assert state.peak_bytes == 1000 * MiB and not core.resizes


def test_grown_steps_say_their_container_resizes_without_a_restart() -> None:
    container = {
        "name": "dagster",
        "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}],
    }
    manifest = {"spec": {"template": {"spec": {"containers": [container]}}}}
    resizable(manifest)
    assert container["resizePolicy"] == [
        {"resourceName": "cpu", "restartPolicy": "RestartContainer"},  # the user's choice stays
        {"resourceName": "memory", "restartPolicy": "NotRequired"},
    ]
