"""What the kubelet keeps about the pods it runs, and what it reports from that.

`PodRun` and `ContainerRun` are the kubelet's records (`kubelet.py` fills them); `reported`
turns a record into the pod's status as a kubelet writes it (phase, container states,
conditions, IPs, the reason of an eviction or a deadline), and `stats_summary` into the
node's `/stats/summary` document.

Example:
    >>> exit_phase([0, 0]), exit_phase([0, 1])
    ('Succeeded', 'Failed')
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .containers import ContainerProcess, Exit, terminated_state
from .lifecycle import is_terminal, set_condition
from .resize import DEFERRED, PENDING
from .store import Obj, Store, now_rfc3339


@dataclass
class ContainerRun:
    """One container of a pod over its restarts."""

    name: str
    image: str
    container_id: str = ""
    process: ContainerProcess | None = None
    restarts: int = 0
    exit: Exit | None = None  # current terminated state
    last_exit: Exit | None = None  # lastState.terminated
    logs: list[Path] = field(default_factory=list)  # one file per run
    sample: tuple[float, int, str] | None = None  # the last stats sample: (monotonic, bytes, time)


@dataclass
class PodRun:
    """What the kubelet keeps about one pod it runs."""

    store: Store
    uid: str
    directory: Path
    containers: dict[str, ContainerRun]
    started_at: str
    waiting: dict[str, tuple[str, str]] = field(default_factory=dict)  # name → (reason, message)
    started: bool = False
    deadline_exceeded: bool = False  # spec.activeDeadlineSeconds passed: the pod is killed
    node: str = ""
    namespace: str = ""
    name: str = ""
    allocated: dict[str, dict[str, Any]] = field(default_factory=dict)  # container → resources
    resize_pending: str = ""  # why the desired resources wait (PodResizePending message)
    resize_generation: int = 0  # the pod generation the pending resize was reported for


def exit_phase(codes: list[int]) -> str:
    """The phase of a pod whose containers all exited with `codes`."""
    return "Succeeded" if all(code == 0 for code in codes) else "Failed"


def reported(run: PodRun, pod: Obj) -> Obj:
    """A copy of `pod` with the status the kubelet reports for `run`."""
    new = copy.deepcopy(pod)
    status = new.setdefault("status", {})
    running = [s for s in run.containers.values() if s.process is not None]
    exits = [s.exit for s in run.containers.values() if s.exit is not None]
    all_exited = run.started and len(exits) == len(run.containers)
    deleting = bool(pod["metadata"].get("deletionTimestamp"))
    if all_exited or ((deleting or run.deadline_exceeded) and not running):
        status["phase"] = exit_phase([e.code for e in exits] if all_exited else [1])
    elif run.started:
        status["phase"] = "Running"
    status["containerStatuses"] = [container_status(run, s) for s in run.containers.values()]
    _pod_conditions(status, ready=bool(running) and len(running) == len(run.containers))
    if run.resize_pending and not is_terminal(new):
        set_condition(status, PENDING, "True", DEFERRED, run.resize_pending)
    else:
        status["conditions"] = [c for c in status["conditions"] if c["type"] != PENDING]
    status.update(hostIP="127.0.0.1", hostIPs=[{"ip": "127.0.0.1"}], podIP="127.0.0.1")
    status.update(podIPs=[{"ip": "127.0.0.1"}], startTime=run.started_at)
    if deleting and is_terminal(new):
        _deletion_reason(status)
    if run.deadline_exceeded and is_terminal(new):
        status.update(
            reason="DeadlineExceeded",
            message="Pod was active on the node longer than the specified deadline",
        )
    return new


def container_status(run: PodRun, state: ContainerRun) -> dict[str, Any]:
    """One entry of `status.containerStatuses`."""
    current: dict[str, Any]
    if state.process is not None:
        current = {"running": {"startedAt": state.process.started_at}}
    elif state.exit is not None:
        current = {"terminated": terminated_state(state.exit, state.container_id)}
    else:
        reason, message = run.waiting.get(state.name, ("ContainerCreating", ""))
        current = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
    last = {}
    if state.last_exit is not None:
        last = {"terminated": terminated_state(state.last_exit, state.container_id)}
    status = {
        "name": state.name,
        "image": state.image,
        "imageID": f"{state.image}@sha256:{'0' * 64}" if state.container_id else "",
        "ready": state.process is not None,
        "restartCount": state.restarts,
        "started": state.process is not None,
        "state": current,
        "lastState": last,
    }
    if state.container_id:
        status["containerID"] = state.container_id
    if state.process is not None and state.name in run.allocated:
        status["resources"] = copy.deepcopy(run.allocated[state.name])
    return status


# The kubelet's summary reads cAdvisor, which samples a container every housekeeping interval
# (10 s, up to 15 s when it is quiet): what it says of a container can be that old. A real
# kubelet measured here answered 10-20 s behind a fast-growing container.
HOUSEKEEPING_S = 10.0


def stats_summary(
    runs: Iterable[PodRun],
    node: str,
    store: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """The kubelet's `/stats/summary` for `node`: memory in use per running container, as last
    sampled (a container is sampled again once `HOUSEKEEPING_S` passed since its last sample).

    `store` keeps only the pods of one API server (an emulator tenant).
    """
    stamp, now = now_rfc3339(), clock()
    pods = []
    for run in runs:
        if run.node != node or (store is not None and run.store.name != store):
            continue
        containers: list[dict[str, Any]] = []
        total = 0
        for state in list(run.containers.values()):
            process = state.process
            if process is None:
                continue
            if state.sample is None or now - state.sample[0] >= HOUSEKEEPING_S:
                state.sample = (now, process.memory_in_use(), stamp)
            _, used, sampled = state.sample
            total += used
            memory = {"time": sampled, "workingSetBytes": used, "rssBytes": used}
            memory["usageBytes"] = used
            containers.append(
                {"name": state.name, "startTime": process.started_at, "memory": memory}
            )
        pods.append(
            {
                "podRef": {"name": run.name, "namespace": run.namespace, "uid": run.uid},
                "startTime": run.started_at,
                "containers": containers,
                "memory": {"time": stamp, "workingSetBytes": total},
            }
        )
    return {"node": {"nodeName": node}, "pods": pods}


def _pod_conditions(status: dict[str, Any], ready: bool) -> None:
    done = status.get("phase") in ("Succeeded", "Failed")
    reason = "PodCompleted" if done else ("" if ready else "ContainersNotReady")
    set_condition(status, "PodReadyToStartContainers", "False" if done else "True")
    set_condition(status, "Initialized", "True", "PodCompleted" if done else "")
    for type_ in ("Ready", "ContainersReady"):
        set_condition(status, type_, "True" if ready else "False", reason)
    set_condition(status, "PodScheduled", "True")


def _deletion_reason(status: dict[str, Any]) -> None:
    for condition in status.get("conditions") or []:
        if (
            condition["type"] == "DisruptionTarget"
            and condition.get("reason") == "EvictionByEvictionAPI"
        ):
            status.update(reason="Evicted", message="The pod was evicted via the Eviction API.")


__all__ = ["ContainerRun", "PodRun", "container_status", "exit_phase", "reported", "stats_summary"]
