"""`PodGrowth` against a recording stand-in for the API: when it reads node stats, when it
asks for a resize, and how it reads the outcome from the pod (no cluster needed)."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from k8s_ai_orchestrator.backends.base import GrowOutcome, MemoryGrowth
from k8s_ai_orchestrator.backends.kubernetes.api import ApiRetry
from k8s_ai_orchestrator.backends.kubernetes.growth import PodGrowth, PodMemory, resizable
from tests.support import FakeClock

MiB, GiB = 1024**2, 1024**3


class FakeCore:
    """Answers the node summary with `used` bytes for pod ns/p; records resizes."""

    def __init__(self, used: int, stats_error: int | None = None, resize_error: int | None = None):
        self.used, self.stats_error, self.resize_error = used, stats_error, resize_error
        self.stats_reads = 0
        self.resizes: list[dict[str, Any]] = []

    def connect_get_node_proxy_with_path(self, node: str, path: str, **_: Any) -> Any:
        self.stats_reads += 1
        assert (node, path) == ("n1", "stats/summary")
        if self.stats_error:
            raise ApiException(status=self.stats_error, reason="Forbidden")
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


def test_below_the_threshold_memory_is_measured_at_most_once_a_second(clock: FakeClock) -> None:
    core, state = FakeCore(used=500 * MiB), PodMemory(limit_bytes=GiB)
    grower = growth(clock, POLICY)
    for _ in range(5):
        grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
        clock.advance(0.3)
    assert core.stats_reads == 2 and state.peak_bytes == 500 * MiB and not core.resizes


def test_past_the_threshold_the_pod_is_resized_and_accepted_once_the_status_shows_it(
    clock: FakeClock,
) -> None:
    core, state = FakeCore(used=900 * MiB), PodMemory(limit_bytes=GiB)
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
    core, state = FakeCore(used=900 * MiB), PodMemory(limit_bytes=GiB)
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
    core, state = FakeCore(used=900 * MiB, resize_error=403), PodMemory(limit_bytes=GiB)
    grower = growth(clock, POLICY)
    for _ in range(3):
        grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
        clock.advance(1.5)
    (refused,) = state.resizes
    assert refused.outcome is GrowOutcome.REFUSED
    assert refused.reason == "the API server refused the resize (403 Forbidden)"


def test_without_node_stats_the_tenant_is_not_asked_again(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    core, state = FakeCore(used=900 * MiB, stats_error=403), PodMemory(limit_bytes=GiB)
    grower = growth(clock, POLICY)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            grower.observe(core, "team-a", pod(), state)  # type: ignore[arg-type]
            clock.advance(1.5)
    assert core.stats_reads == 1 and not core.resizes
    assert "cannot read node stats (403 Forbidden)" in caplog.text
    assert "grant get on nodes/proxy" in caplog.text


def test_without_a_policy_memory_is_measured_but_never_grown(clock: FakeClock) -> None:
    core, state = FakeCore(used=1000 * MiB), PodMemory(limit_bytes=GiB)
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
