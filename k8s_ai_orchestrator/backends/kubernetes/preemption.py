"""Who preempted a step: the scheduler's `Preempted` event, then what the tenant can see.

The scheduler marks each victim pod `DisruptionTarget` (PreemptionByScheduler) and records
`Preempted by pod <uid> on node <node>` on it. Inside a vCluster tenant that UID is the
*host* pod's: the real vCluster syncer copies host events into the tenant with the host's
message, and a tenant cannot read host pods. So the preemptor is named, in this order:

1. the tenant pod with that UID (a plain cluster, or a syncer that rewrites UIDs);
2. else the tenant's step pods that outrank the victim and are nominated for
   (`status.nominatedNodeName`) or were scheduled onto (`PodScheduled` after the disruption)
   the victim's node — what a preemptor does, and what vCluster copies back to the tenant;
3. else "a higher-priority pod ... this tenant cannot name", with the UID the scheduler gave
   (another tenant's or namespace's pod, or a host UID).

A gang is named from its preempted pods (`name_preemptor_of_any`). A step that stopped itself
on SIGTERM can say Preempted before the tenant shows the victim's `DisruptionTarget` or the
`Preempted` event, and a victim can end before its tenant shows the preemptor nominated (a
syncer copies host status a moment later); `wait_for_preemptor` then reads them again for a
short, bounded time: until the marks show and a tenant pod is named, the naming at most
`NAME_SETTLE_S` after the marks.

Example:
    >>> preemptor_uid("Preempted by pod 6f1c-22 on node node-b")
    ('6f1c-22', 'node-b')
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from ..base import FailureReason, StepStatus
from .status import condition_of, disruption_target, pod_name

_PREEMPTED = re.compile(r"Preempted by pod (?P<uid>\S+) on node (?P<node>\S+)")
RUN_ANNOTATION = "k8s-ai/run-id"
STEP_ANNOTATION = "k8s-ai/step-key"
Obj = Mapping[str, Any]
PREEMPTOR_WAIT_CAP_S = 10.0  # the longest a step that said Preempted waits for the marks
PREEMPTOR_POLL_S = 0.5  # between reads of the victim and its events while it waits
NAME_SETTLE_S = 3.0  # once the marks show, how long a tenant pod may take to be named
DEFAULT_GRACE_S = 30.0  # a pod's terminationGracePeriodSeconds when its spec has none


def preemptor_uid(message: str) -> tuple[str, str] | None:
    """(preemptor UID, node) from a `Preempted` event message, if it is one."""
    found = _PREEMPTED.search(message)
    return (found.group("uid"), found.group("node")) if found else None


@dataclass(frozen=True)
class Preemptor:
    """Who preempted a pod, in words."""

    text: str  # "preempted by step 'train' of run 'r1' (pod p) on node-b"
    named: bool  # a pod of the tenant was found; False: only the scheduler's UID is known


def name_preemptor(victim: Obj, events: Iterable[Obj], pods: Sequence[Obj]) -> Preemptor | None:
    """Who preempted `victim`, from its events and the pods of its namespace (API JSON);
    None while nothing names the preemptor yet.

    Example:
        >>> victim = {"metadata": {"uid": "v"}, "spec": {"nodeName": "node-b"}}
        >>> train = {"metadata": {"uid": "t", "name": "p",
        ...     "annotations": {STEP_ANNOTATION: "train", RUN_ANNOTATION: "r1"}}}
        >>> event = {"reason": "Preempted", "message": "Preempted by pod t on node node-b"}
        >>> name_preemptor(victim, [event], [victim, train]).text
        "preempted by step 'train' of run 'r1' (pod p) on node-b"
    """
    events = list(events)
    said = [preemptor_uid(e.get("message") or "") for e in events if e.get("reason") == "Preempted"]
    uid, node = next((pair for pair in reversed(said) if pair is not None), (None, None))
    node = node or (victim.get("spec") or {}).get("nodeName")
    if not node:
        return None
    by_uid = [p for p in pods if uid is not None and _meta(p).get("uid") == uid]
    found = by_uid or _nominated_or_scheduled(victim, node, pods, _preempted_at(victim, events))
    if found:
        return Preemptor(f"preempted by {' or '.join(_describe_steps(found))} on {node}", True)
    if uid is None:
        return None
    return Preemptor(
        f"preempted by a higher-priority pod on {node} that this tenant cannot name (the "
        f"scheduler names pod {uid}: another tenant's or namespace's pod, or a host pod UID, "
        "which a vCluster tenant cannot resolve)",
        False,
    )


def name_preemptor_of_any(
    victims: Sequence[Obj], events_of: Mapping[str, Sequence[Obj]], pods: Sequence[Obj]
) -> Preemptor | None:
    """`name_preemptor` asked for each victim (a gang's preempted pods), with `events_of`
    a victim's name: the first answer that names a step, else the first answer, else None.

    Example:
        >>> victim = {"metadata": {"name": "v"}, "spec": {"nodeName": "node-b"}}
        >>> event = {"reason": "Preempted", "message": "Preempted by pod h on node node-b"}
        >>> name_preemptor_of_any([victim], {"v": [event]}, [victim]).named
        False
    """
    answers = [name_preemptor(v, events_of.get(_name(v), ()), pods) for v in victims]
    found = [a for a in answers if a is not None]
    return next((a for a in found if a.named), found[0] if found else None)


def who_preempted(core: CoreV1Api, namespace: str, victims: Sequence[Obj]) -> Preemptor | None:
    """`name_preemptor_of_any` for pods of `namespace`, reading their events and the
    namespace's pods (one request per victim, and one); None if they cannot be read or
    nothing names the preemptor yet."""
    pods = _read_items(lambda: core.list_namespaced_pod(namespace, _preload_content=False))
    if pods is None:
        return None
    events_of = {}
    for victim in victims:
        events = _read_events(core, namespace, victim)
        if events is None:
            return None
        events_of[_name(victim)] = events
    return name_preemptor_of_any(victims, events_of, pods)


def wait_for_preemptor(
    core: CoreV1Api,
    namespace: str,
    victims: Sequence[Obj],
    *,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    cap_s: float = PREEMPTOR_WAIT_CAP_S,
) -> Preemptor | None:
    """`who_preempted`, once the victims' scheduler marks show (their `DisruptionTarget`
    condition or the scheduler's `Preempted` event) and a tenant pod is named. The victims,
    their events and the namespace's pods are read again every `PREEMPTOR_POLL_S`: until a
    mark shows, for at most the victims' shortest termination grace period and at most
    `cap_s`; then until the preemptor is named, for at most `NAME_SETTLE_S` more (by the
    injected `clock` and `sleep`).

    Example:
        >>> wait_for_preemptor(core, "ns", [victim], clock=time.monotonic,
        ...     sleep=time.sleep)  # doctest: +SKIP
    """
    bound_s = min([cap_s, *(_grace_s(v) for v in victims)])
    deadline = clock() + bound_s
    polls = int((bound_s + NAME_SETTLE_S) / PREEMPTOR_POLL_S) + 1  # bounded if the clock stalls
    found, marked_at = None, None
    for _ in range(polls):
        fresh = [_read_pod(core, namespace, v) for v in victims]
        events_of = {_name(v): _read_events(core, namespace, v) or [] for v in fresh}
        pods = _read_items(lambda: core.list_namespaced_pod(namespace, _preload_content=False))
        found = name_preemptor_of_any(fresh, events_of, pods or fresh)
        if any(_marked(v, events_of[_name(v)]) for v in fresh):
            if found is not None and found.named:
                break
            marked_at = clock() if marked_at is None else marked_at
            if clock() >= marked_at + NAME_SETTLE_S:
                break
        elif clock() >= deadline:
            break
        sleep(PREEMPTOR_POLL_S)
    return found


@dataclass
class PreemptorLookup:
    """Who preempted one attempt, as far as known: asked of the tenant while its status is
    Preempted, and waited for at most once after its step said Preempted (`wait`)."""

    found: Preemptor | None = None
    settled: bool = False  # waited once, or admission (Kueue) named the preemptor itself

    def name(self, core: CoreV1Api, namespace: str, victims: Sequence[Obj], message: str) -> str:
        """`message` with who preempted the victims, read again until a tenant pod names it."""
        if (self.found is None or not self.found.named) and victims:
            self.found = who_preempted(core, namespace, victims) or self.found
        if self.found is None:
            return message
        return f"{message}; {self.found.text}" if message else self.found.text

    def wait(
        self,
        core: CoreV1Api,
        namespace: str,
        victims: Sequence[Obj],
        *,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
    ) -> str:
        """Who preempted the attempt, in words ("" if nothing names it); unless named or
        settled, waits for the scheduler's marks once (`wait_for_preemptor`)."""
        named = self.found is not None and self.found.named
        if not named and not self.settled:
            self.settled = True
            if victims:
                found = wait_for_preemptor(core, namespace, victims, clock=clock, sleep=sleep)
                self.found = found or self.found
        return self.found.text if self.found is not None else ""

    def named_by_admission(self) -> None:
        """Admission took the attempt back and named who for it: no scheduler marks to wait
        for."""
        self.settled = True


def preempted_event(core: CoreV1Api, namespace: str, victim: Obj) -> str:
    """The scheduler's `Preempted` event message on `victim` ("" when none can be read): what
    still says a pod was preempted when its host pod went before its DisruptionTarget and end
    were copied to the tenant (vCluster copies events, not a vanished pod's last status)."""
    events = _read_events(core, namespace, victim) or []
    return next((e.get("message") or "" for e in events if e.get("reason") == "Preempted"), "")


def preempted_unseen(lost: StepStatus, pod: Mapping[str, Any], said: str) -> StepStatus:
    """A pod that reads Lost (deleted, never ended) which the scheduler's `Preempted` event
    message `said` says was preempted: Preempted, as it would read had its DisruptionTarget
    reached the tenant (vCluster copies a host pod's events, not the last status of a host pod
    that vanished). Any other status, or no such event, is left as it is.

    Example:
        >>> lost = StepStatus.failed(FailureReason.LOST, "pod r1 was deleted before it finished")
        >>> preempted_unseen(lost, {"metadata": {"name": "r1"}}, "Preempted by pod h on node n")
        ... # doctest: +NORMALIZE_WHITESPACE
        StepStatus(state=<StepState.FAILED: 'Failed'>, reason=<FailureReason.PREEMPTED:
        'Preempted'>, message='PreemptionByScheduler: pod r1 was preempted (Preempted by pod h
        on node n) and deleted before its end reached this tenant', exit_code=None, node=None,
        waiting='')
    """
    if not said or lost.reason != FailureReason.LOST:
        return lost
    message = (
        f"PreemptionByScheduler: pod {pod_name(pod)} was preempted ({said}) and deleted "
        "before its end reached this tenant"
    )
    return StepStatus.failed(FailureReason.PREEMPTED, message, node=lost.node)


def _marked(victim: Obj, events: Sequence[Obj]) -> bool:
    """Whether the scheduler's preemption of `victim` shows in the tenant yet."""
    marked = disruption_target(victim.get("status") or {}) is not None
    return marked or any(e.get("reason") == "Preempted" for e in events)


def _grace_s(victim: Obj) -> float:
    grace = (victim.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(grace) if grace is not None else DEFAULT_GRACE_S


def _read_pod(core: CoreV1Api, namespace: str, victim: Obj) -> Obj:
    """The victim as the API server has it now; as it was last seen if that cannot be read
    (deleted already, or a failed request)."""
    try:
        answer = core.read_namespaced_pod(_name(victim), namespace, _preload_content=False)
        fresh = json.loads(answer.data)
    except (ApiException, ValueError):
        return victim
    return fresh if isinstance(fresh, dict) else victim


def _read_events(core: CoreV1Api, namespace: str, victim: Obj) -> list[Obj] | None:
    selector = f"involvedObject.name={_name(victim)}"
    return _read_items(
        lambda: core.list_namespaced_event(
            namespace, field_selector=selector, _preload_content=False
        )
    )


def _read_items(request: Callable[[], Any]) -> list[Obj] | None:
    """The `items` of a list request made with `_preload_content=False`; None on failure."""
    try:
        return json.loads(request().data).get("items") or []
    except (ApiException, ValueError):
        return None


def _name(pod: Obj) -> str:
    return str(_meta(pod).get("name"))


def _nominated_or_scheduled(
    victim: Obj, node: str, pods: Sequence[Obj], since: datetime | None
) -> list[Obj]:
    """The step pods (of another step) that outrank the victim and took, or will take, its
    place on `node`: nominated for it, or scheduled onto it at or after `since` (the
    preemption; unknown: only nominated pods)."""
    mine = _step_of(victim)
    found = []
    for pod in pods:
        if _step_of(pod) in (None, mine) or not _outranks(pod, victim):
            continue
        status = pod.get("status") or {}
        scheduled = condition_of(status, "PodScheduled") or {}
        if status.get("nominatedNodeName") == node:
            found.append(pod)
        elif (pod.get("spec") or {}).get("nodeName") == node and scheduled.get("status") == "True":
            at = _time(scheduled.get("lastTransitionTime"))
            if since is not None and at is not None and at >= since:
                found.append(pod)
    return found


def _describe_steps(pods: Sequence[Obj]) -> list[str]:
    """ "step 'train' of run 'r1' (pod p)" once per step and run (a gang has several pods)."""
    named: dict[tuple[str, str] | None, str] = {}
    for pod in pods:
        step = _step_of(pod)
        if step not in named:
            what = f"pod {_meta(pod).get('name') or _meta(pod).get('uid')}"
            named[step] = f"step '{step[0]}' of run '{step[1]}' ({what})" if step else what
    return list(named.values())


def _step_of(pod: Obj) -> tuple[str, str] | None:
    notes = _meta(pod).get("annotations") or {}
    if STEP_ANNOTATION not in notes:
        return None
    return str(notes[STEP_ANNOTATION]), str(notes.get(RUN_ANNOTATION, "?"))


def _outranks(pod: Obj, victim: Obj) -> bool:
    """True unless both priorities are known and `pod`'s is not higher."""
    mine, theirs = (p.get("spec", {}).get("priority") for p in (pod, victim))
    return mine is None or theirs is None or int(mine) > int(theirs)


def _preempted_at(victim: Obj, events: Iterable[Obj]) -> datetime | None:
    """When the scheduler preempted `victim`, to the second (a `PodScheduled` time has no
    finer grain): its `DisruptionTarget` condition's time, else its `Preempted` event's
    (a victim deleted before its condition reached the tenant keeps only the event)."""
    condition = condition_of(victim.get("status") or {}, "DisruptionTarget") or {}
    times = [_time(condition.get("lastTransitionTime"))]
    if times[0] is None:
        said = [e for e in events if e.get("reason") == "Preempted"]
        times = [_time(e.get(k)) for e in said for k in ("eventTime", "firstTimestamp")]
    known = [t for t in times if t is not None]
    return min(known).replace(microsecond=0) if known else None


def _time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def describe_uid(objects: Iterable[Any], uid: str, kind: str, namespace: str) -> str:
    """ "step 'train' of run 'r1' (<kind> <name>)" for the object (a kubernetes-client model
    carrying the backend's annotations) with `uid`, or what is known of it.

    Example:
        >>> describe_uid([], "6f1c", "Job", "default")
        "Job 6f1c (not in namespace 'default')"
    """
    for found in objects:
        if found.metadata.uid == uid:
            notes = found.metadata.annotations or {}
            if STEP_ANNOTATION in notes:
                return (
                    f"step '{notes[STEP_ANNOTATION]}' of run '{notes.get(RUN_ANNOTATION, '?')}' "
                    f"({kind} {found.metadata.name})"
                )
            return f"{kind} {found.metadata.name}"
    return f"{kind} {uid} (not in namespace '{namespace}')"
