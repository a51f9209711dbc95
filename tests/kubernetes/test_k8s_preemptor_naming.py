"""Naming the preemptor of a pod from its `Preempted` event and the pods its tenant can see.

Inside a real vCluster tenant the event's UID is the host pod's, which no tenant pod has: the
preemptor is then found by the node it was nominated for or scheduled onto.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from k8s_ai_orchestrator.backends.kubernetes.gangs import preempted_pods
from k8s_ai_orchestrator.backends.kubernetes.preemption import (
    NAME_SETTLE_S,
    PREEMPTOR_POLL_S,
    PREEMPTOR_WAIT_CAP_S,
    RUN_ANNOTATION,
    STEP_ANNOTATION,
    name_preemptor,
    name_preemptor_of_any,
    preempted_event,
    wait_for_preemptor,
)
from tests.support import FakeClock

PREEMPTED_AT = "2026-12-01T04:00:10Z"


def step_pod(
    name: str,
    uid: str,
    step: str | None,
    run: str = "r1",
    *,
    priority: int | None = 1000,
    node: str | None = None,
    nominated: str | None = None,
    scheduled_at: str | None = None,
    disrupted_at: str | None = None,
    phase: str | None = None,
) -> dict[str, Any]:
    notes = {STEP_ANNOTATION: step, RUN_ANNOTATION: run} if step else {}
    conditions = []
    if scheduled_at:
        conditions.append(
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled_at}
        )
    if disrupted_at:
        conditions.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "lastTransitionTime": disrupted_at,
            }
        )
    status: dict[str, Any] = {"conditions": conditions}
    if phase:
        status["phase"] = phase
    if nominated:
        status["nominatedNodeName"] = nominated
    spec: dict[str, Any] = {"nodeName": node} if node else {}
    if priority is not None:
        spec["priority"] = priority
    return {
        "metadata": {"name": name, "uid": uid, "annotations": notes},
        "spec": spec,
        "status": status,
    }


VICTIM = step_pod(
    "embed-0", "v-uid", "embed", "r0", priority=100, node="node-b", disrupted_at=PREEMPTED_AT
)


def preempted(uid: str, node: str = "node-b") -> dict[str, Any]:
    return {"reason": "Preempted", "message": f"Preempted by pod {uid} on node {node}"}


TRAIN_NOMINATED = step_pod("train-0", "t-uid", "train", nominated="node-b")
TRAIN_BOUND = step_pod("train-0", "t-uid", "train", node="node-b", scheduled_at=PREEMPTED_AT)
TRAIN_BOUND_EARLIER = step_pod(
    "train-0", "t-uid", "train", node="node-b", scheduled_at="2026-12-01T03:00:00Z"
)
GANG_RANK_1 = step_pod("train-1", "t1-uid", "train", nominated="node-b")
LOWER = step_pod("fill-0", "f-uid", "fill", priority=10, nominated="node-b")
OTHER_NODE = step_pod("train-0", "t-uid", "train", nominated="node-a")
SAME_STEP = step_pod("embed-1", "e1-uid", "embed", "r0", nominated="node-b")
NOT_OURS = step_pod("sidecar", "s-uid", None, nominated="node-b")
CANNOT = (
    "preempted by a higher-priority pod on node-b that this tenant cannot name (the scheduler "
    "names pod h-uid: another tenant's or namespace's pod, or a host pod UID, which a vCluster "
    "tenant cannot resolve)"
)
BY_TRAIN = "preempted by step 'train' of run 'r1' (pod train-0) on node-b"


@pytest.mark.parametrize(
    ("events", "pods", "expected"),
    [
        pytest.param([preempted("t-uid")], [TRAIN_BOUND], BY_TRAIN, id="tenant-uid-in-the-event"),
        pytest.param(
            [preempted("h-uid")], [TRAIN_NOMINATED], BY_TRAIN, id="host-uid-nominated-pod"
        ),
        pytest.param([preempted("h-uid")], [TRAIN_BOUND], BY_TRAIN, id="host-uid-bound-after"),
        pytest.param([], [TRAIN_NOMINATED], BY_TRAIN, id="no-event-yet-nominated-pod"),
        pytest.param(
            [preempted("h-uid")], [TRAIN_NOMINATED, GANG_RANK_1], BY_TRAIN, id="a-gang-once"
        ),
        pytest.param(
            [preempted("h-uid")],
            [TRAIN_NOMINATED, step_pod("tune-0", "u-uid", "tune", "r2", nominated="node-b")],
            "preempted by step 'train' of run 'r1' (pod train-0) or step 'tune' of run 'r2' "
            "(pod tune-0) on node-b",
            id="two-steps-both-named",
        ),
        pytest.param([preempted("h-uid")], [TRAIN_BOUND_EARLIER], CANNOT, id="bound-before"),
        pytest.param([preempted("h-uid")], [LOWER], CANNOT, id="lower-priority"),
        pytest.param([preempted("h-uid")], [OTHER_NODE], CANNOT, id="other-node"),
        pytest.param([preempted("h-uid")], [SAME_STEP], CANNOT, id="same-step"),
        pytest.param([preempted("h-uid")], [NOT_OURS], CANNOT, id="not-a-step-pod"),
        pytest.param([preempted("h-uid")], [], CANNOT, id="nothing-visible"),
        pytest.param([], [], None, id="nothing-known-yet"),
        pytest.param(
            [{"reason": "Killing", "message": "Stopping container main"}],
            [LOWER],
            None,
            id="other-events-only",
        ),
    ],
)
def test_the_preemptor_is_named_by_uid_else_by_node_and_time_else_said_unknown(
    events: list[dict[str, Any]], pods: list[dict[str, Any]], expected: str | None
) -> None:
    found = name_preemptor(VICTIM, events, [VICTIM, *pods])

    assert (found.text if found else None) == expected
    if found is not None:
        assert found.named == (expected != CANNOT)


def test_without_a_disruption_time_a_pod_already_bound_to_the_node_is_not_taken() -> None:
    victim = step_pod("embed-0", "v-uid", "embed", "r0", priority=100, node="node-b")

    found = name_preemptor(victim, [preempted("h-uid")], [victim, TRAIN_BOUND])

    assert found is not None and not found.named


@pytest.mark.parametrize("time_key", ["eventTime", "firstTimestamp"])
def test_a_victim_gone_before_its_condition_is_dated_by_its_preempted_event(
    time_key: str,
) -> None:
    """A victim deleted before its DisruptionTarget reached the tenant: the scheduler's
    `Preempted` event dates the preemption (to the second: PodScheduled has no finer grain),
    so a pod bound to the node since then is its preemptor, one bound before is not."""
    victim = step_pod("embed-0", "v-uid", "embed", "r0", priority=100, node="node-b")
    event = {**preempted("h-uid"), time_key: "2026-12-01T04:00:10.734112Z"}

    after = name_preemptor(victim, [event], [victim, TRAIN_BOUND])
    before = name_preemptor(victim, iter([event]), [victim, TRAIN_BOUND_EARLIER])

    assert after is not None and after.text == BY_TRAIN
    assert before is not None and before.text == CANNOT


# A gang step ("embed" of run r0, two pods) whose own pods the scheduler preempts.
EMBED_0 = step_pod("embed-0", "e0-uid", "embed", "r0", priority=100, node="node-a", phase="Running")
EMBED_1_PREEMPTED = step_pod(
    "embed-1",
    "e1-uid",
    "embed",
    "r0",
    priority=100,
    node="node-b",
    disrupted_at=PREEMPTED_AT,
    phase="Running",
)
EMBED_0_PREEMPTED = step_pod(
    "embed-0", "e0-uid", "embed", "r0", priority=100, node="node-a", disrupted_at=PREEMPTED_AT
)
EMBED_1_GONE = {**EMBED_1_PREEMPTED, "status": {**EMBED_1_PREEMPTED["status"], "phase": "Failed"}}
TRAIN_ON_A = step_pod("train-0", "t-uid", "train", nominated="node-a")


@pytest.mark.parametrize(
    ("live", "gone", "events_of", "others", "expected"),
    [
        pytest.param(
            [EMBED_0, EMBED_1_PREEMPTED],
            [],
            {"embed-1": [preempted("h-uid")]},
            [TRAIN_NOMINATED],
            BY_TRAIN,
            id="one-pod-stopping-host-uid-nominated",
        ),
        pytest.param(
            [EMBED_0],
            [EMBED_1_GONE],
            {"embed-1": [preempted("t-uid")]},
            [TRAIN_BOUND],
            BY_TRAIN,
            id="preempted-pod-already-deleted-tenant-uid",
        ),
        pytest.param(
            [EMBED_0_PREEMPTED, EMBED_1_PREEMPTED],
            [],
            {"embed-0": [preempted("h-uid", "node-a")], "embed-1": [preempted("h-uid")]},
            [TRAIN_NOMINATED, GANG_RANK_1],
            BY_TRAIN,
            id="both-pods-one-node-named-wins",
        ),
        pytest.param(
            [EMBED_0_PREEMPTED, EMBED_1_PREEMPTED],
            [],
            {"embed-0": [preempted("h-uid", "node-a")]},
            [TRAIN_ON_A],
            "preempted by step 'train' of run 'r1' (pod train-0) on node-a",
            id="both-pods-the-leader-named",
        ),
        pytest.param(
            [EMBED_0, EMBED_1_PREEMPTED],
            [],
            {"embed-1": [preempted("h-uid")]},
            [],
            CANNOT,
            id="nothing-visible",
        ),
        pytest.param(
            [EMBED_0, EMBED_1_PREEMPTED],
            [],
            {},
            [step_pod("embed-2", "e2-uid", "embed", "r0", nominated="node-b")],
            None,
            id="own-gang-pods-are-not-the-preemptor",
        ),
        pytest.param([EMBED_0], [], {}, [TRAIN_NOMINATED], None, id="no-pod-preempted"),
    ],
)
def test_a_gang_is_named_from_its_preempted_pods(
    live: list[dict[str, Any]],
    gone: list[dict[str, Any]],
    events_of: dict[str, list[dict[str, Any]]],
    others: list[dict[str, Any]],
    expected: str | None,
) -> None:
    victims = preempted_pods(live, gone)

    found = name_preemptor_of_any(victims, events_of, [*live, *others])

    assert (found.text if found else None) == expected


class LateMarksTenant:
    """A tenant API whose victim pod shows DisruptionTarget (and the scheduler's Preempted
    event, naming the preemptor's UID) only from its `marks_after`-th read on, as when the
    step hears its SIGTERM before vCluster has synced the host pod's status and events."""

    def __init__(self, victim: dict[str, Any], others: list[dict[str, Any]], marks_after: int):
        self.victim, self.others, self.marks_after = victim, others, marks_after
        self.pod_reads = 0

    def _marked(self) -> bool:
        return self.pod_reads >= self.marks_after

    def read_namespaced_pod(self, name: str, namespace: str, **_: Any) -> Any:
        assert (name, namespace) == ("embed-0", "ns")
        self.pod_reads += 1
        pod = json.loads(json.dumps(self.victim))
        if self._marked():
            pod["status"]["conditions"].append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "lastTransitionTime": PREEMPTED_AT,
                }
            )
        return SimpleNamespace(data=json.dumps(pod).encode())

    def list_namespaced_event(self, namespace: str, field_selector: str, **_: Any) -> Any:
        assert field_selector == "involvedObject.name=embed-0"
        items = [preempted("t-uid")] if self._marked() else []
        return SimpleNamespace(data=json.dumps({"items": items}).encode())

    def list_namespaced_pod(self, namespace: str, **_: Any) -> Any:
        return SimpleNamespace(data=json.dumps({"items": [self.victim, *self.others]}).encode())


def sleeping(clock: FakeClock, slept: list[float]) -> Any:
    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    return sleep


def test_a_step_that_said_preempted_first_waits_for_the_marks_then_names_the_preemptor() -> None:
    victim = step_pod("embed-0", "v-uid", "embed", "r0", priority=100, node="node-b")
    tenant = LateMarksTenant(victim, [TRAIN_BOUND], marks_after=3)
    core: Any = tenant
    clock, slept = FakeClock(), []
    assert name_preemptor(victim, [], [victim, TRAIN_BOUND]) is None  # what it sees at first

    found = wait_for_preemptor(core, "ns", [victim], clock=clock, sleep=sleeping(clock, slept))

    assert found is not None and found.text == BY_TRAIN
    assert tenant.pod_reads == 3
    assert slept == [PREEMPTOR_POLL_S, PREEMPTOR_POLL_S]


@pytest.mark.parametrize(
    ("grace_s", "waited_s"), [(2, 2.0), (None, PREEMPTOR_WAIT_CAP_S), (600, PREEMPTOR_WAIT_CAP_S)]
)
def test_the_wait_for_the_marks_ends_with_the_grace_period_or_the_cap(
    grace_s: int | None, waited_s: float
) -> None:
    victim = step_pod("embed-0", "v-uid", "embed", "r0", priority=100, node="node-b")
    if grace_s is not None:
        victim["spec"]["terminationGracePeriodSeconds"] = grace_s
    tenant = LateMarksTenant(victim, [TRAIN_BOUND], marks_after=10_000)
    core: Any = tenant
    clock, slept = FakeClock(), []

    found = wait_for_preemptor(core, "ns", [victim], clock=clock, sleep=sleeping(clock, slept))

    assert sum(slept) == pytest.approx(waited_s)
    assert found is None  # nothing names it: the relaunch says Preempted without a name


def test_the_wait_is_bounded_even_when_the_clock_does_not_move() -> None:
    victim = step_pod("embed-0", "v-uid", "embed", "r0", priority=100, node="node-b")
    tenant = LateMarksTenant(victim, [TRAIN_BOUND], marks_after=10_000)
    core: Any = tenant

    found = wait_for_preemptor(core, "ns", [victim], clock=lambda: 0.0, sleep=lambda s: None)

    assert found is None
    assert tenant.pod_reads == int((PREEMPTOR_WAIT_CAP_S + NAME_SETTLE_S) / PREEMPTOR_POLL_S) + 1


def test_a_pod_gone_before_its_marks_reached_the_tenant_is_known_preempted_by_its_event() -> None:
    victim = step_pod("embed-0", "v-uid", "embed", "r0", priority=100, node="node-b")
    core: Any = LateMarksTenant(victim, [TRAIN_BOUND], marks_after=0)
    assert preempted_event(core, "ns", victim) == "Preempted by pod t-uid on node node-b"
    unmarked: Any = LateMarksTenant(victim, [TRAIN_BOUND], marks_after=10**6)
    assert preempted_event(unmarked, "ns", victim) == ""


class LateNominationTenant(LateMarksTenant):
    """Marked at once, but the preemptor shows in the tenant only from its `named_after`-th
    list of pods (a syncer copies the host pod's nomination a moment later), or never; the
    scheduler's UID is the host's, which no tenant pod has."""

    def __init__(self, victim: dict[str, Any], named_after: int) -> None:
        super().__init__(victim, [TRAIN_BOUND], marks_after=0)
        self.named_after, self.pod_lists = named_after, 0

    def list_namespaced_event(self, namespace: str, field_selector: str, **_: Any) -> Any:
        return SimpleNamespace(data=json.dumps({"items": [preempted("host-uid")]}).encode())

    def list_namespaced_pod(self, namespace: str, **_: Any) -> Any:
        self.pod_lists += 1
        shown = self.others if self.pod_lists >= self.named_after else []
        return SimpleNamespace(data=json.dumps({"items": [self.victim, *shown]}).encode())


@pytest.mark.parametrize(("named_after", "named"), [(3, True), (10_000, False)])
def test_once_marked_the_preemptor_is_waited_for_a_moment_to_be_named(
    named_after: int, named: bool
) -> None:
    """A victim that ended before its tenant showed the preemptor nominated (seen on the
    real plane through our syncer): the naming is read again for at most NAME_SETTLE_S."""
    victim = step_pod("embed-0", "v-uid", "embed", "r0", priority=100, node="node-b")
    victim["spec"]["terminationGracePeriodSeconds"] = 1
    core: Any = LateNominationTenant(victim, named_after)
    clock, slept = FakeClock(), []

    found = wait_for_preemptor(core, "ns", [victim], clock=clock, sleep=sleeping(clock, slept))

    assert found is not None and found.named is named
    if named:
        assert found.text == BY_TRAIN and sum(slept) == 2 * PREEMPTOR_POLL_S
    else:
        assert "host-uid" in found.text and sum(slept) == pytest.approx(NAME_SETTLE_S)
