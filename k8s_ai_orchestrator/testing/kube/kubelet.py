"""The kubelet: runs bound pods' containers as local process groups and reports their status.

It enforces memory limits by sampling the RSS of each container's process tree (OOMKilled,
exit 137), honours terminationGracePeriodSeconds (SIGTERM, then SIGKILL), restarts containers
per restartPolicy, keeps each container's current and previous log, and applies in-place
resizes of running pods when the node has room (`resize.py`).

Example:
    >>> _exit_phase([0, 0]), _exit_phase([0, 1])
    ('Succeeded', 'Failed')
"""

from __future__ import annotations

import copy
import os
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .containers import (
    ContainerConfigError,
    ContainerProcess,
    Exit,
    bad_image,
    container_argv,
    memory_limit_of,
    resolve_env,
    start_error,
    terminated_state,
)
from .lifecycle import is_terminal, put_or_release, record_event, releasable, set_condition
from .resize import DEFERRED, PENDING, desired, event_message, memory_limits, requests_of, shortfall
from .store import ClusterState, Obj, Store, now_rfc3339, parse_rfc3339

# The emulator's own interpreter directory (a venv's bin) comes first on the containers' PATH,
# so commands such as `dagster api execute_step` resolve to the same installation.
_PATH = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


def _exit_phase(codes: list[int]) -> str:
    return "Succeeded" if all(code == 0 for code in codes) else "Failed"


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


class Kubelet:
    """Runs the containers of every pod bound to a node of this emulator."""

    def __init__(
        self, cluster: ClusterState, host: Store, workdir: Path, wake: threading.Event | None = None
    ) -> None:
        self.wake = wake  # set when a container exits, so the control loop runs at once
        self.cluster = cluster
        self.host = host
        self.workdir = workdir
        self.runs: dict[str, PodRun] = {}

    def tick(self) -> None:
        """Start, watch, terminate and report the containers of every bound pod once."""
        nodes = {n["metadata"]["name"]: n for n in self.host.list("nodes")}
        seen = set()
        for store in list(self.cluster.stores.values()):
            for pod in store.list("pods"):
                node = nodes.get((pod.get("spec") or {}).get("nodeName", ""))
                if node is None or not _ready(node):
                    continue
                seen.add(pod["metadata"]["uid"])
                self._sync(store, pod, node)
        for uid in [uid for uid in self.runs if uid not in seen]:
            self._forget(uid)

    def _sync(self, store: Store, pod: Obj, node: Obj) -> None:
        uid = pod["metadata"]["uid"]
        run = self.runs.get(uid)
        if is_terminal(pod) and not pod["metadata"].get("deletionTimestamp"):
            if run is None or not any(s.process for s in run.containers.values()):
                return  # finished and published: nothing left to do
        if run is None:
            run = self._new_run(store, pod)
            run.node = node["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(run, pod, int(pod["metadata"].get("deletionGracePeriodSeconds") or 0))
        elif run.deadline_exceeded or _past_deadline(run, pod):
            run.deadline_exceeded = True
            self._terminate(run, pod, int(pod["spec"].get("terminationGracePeriodSeconds", 30)))
        elif not run.started:
            self._try_start(run, pod)
        else:
            self._resize(run, pod, node)
            self._poll(run, pod)
        self._publish(run, pod)

    def _new_run(self, store: Store, pod: Obj) -> PodRun:
        meta = pod["metadata"]
        directory = (
            self.workdir / store.name / meta["namespace"] / f"{meta['name']}-{meta['uid'][:8]}"
        )
        directory.mkdir(parents=True, exist_ok=True)
        containers = {
            c["name"]: ContainerRun(c["name"], c.get("image", ""))
            for c in pod["spec"]["containers"]
        }
        run = PodRun(store, meta["uid"], directory, containers, now_rfc3339())
        run.allocated = desired(pod)
        run.namespace, run.name = meta["namespace"], meta["name"]
        self.runs[meta["uid"]] = run
        return run

    def _try_start(self, run: PodRun, pod: Obj) -> None:
        waiting: dict[str, tuple[str, str]] = {}
        envs: dict[str, dict[str, str]] = {}
        for container in pod["spec"]["containers"]:
            name, image = container["name"], container.get("image", "")
            if bad_image(image):
                waiting[name] = self._pull_failure(run, pod, name, image)
                continue
            try:
                envs[name] = resolve_env(run.store, pod, container)
            except ContainerConfigError as error:
                if run.waiting.get(name) != ("CreateContainerConfigError", str(error)):
                    record_event(run.store, pod, "Failed", f"Error: {error}", "Warning")
                waiting[name] = ("CreateContainerConfigError", str(error))
        run.waiting = waiting
        if waiting:
            return
        for container in pod["spec"]["containers"]:
            self._spawn(run, pod, container, envs[container["name"]])
        run.started = True

    def _pull_failure(self, run: PodRun, pod: Obj, name: str, image: str) -> tuple[str, str]:
        """ErrImagePull the first time, ImagePullBackOff after; one event per transition."""
        before = run.waiting.get(name, ("", ""))[0]
        if before in ("ErrImagePull", "ImagePullBackOff"):
            if before == "ErrImagePull":
                record_event(run.store, pod, "BackOff", f'Back-off pulling image "{image}"')
            return "ImagePullBackOff", f'Back-off pulling image "{image}"'
        message = f'failed to pull and unpack image "{image}": not found'
        record_event(
            run.store, pod, "Failed", f'Failed to pull image "{image}": {message}', "Warning"
        )
        return "ErrImagePull", message

    def _spawn(self, run: PodRun, pod: Obj, container: Obj, pod_env: dict[str, str]) -> None:
        state = run.containers[container["name"]]
        env = {**os.environ, "PATH": _PATH, "HOSTNAME": pod["metadata"]["name"], **pod_env}
        argv = container_argv(container, env)
        log_path = run.directory / f"{state.name}-{state.restarts}.log"
        log_path.touch()
        state.logs.append(log_path)
        state.container_id = f"containerd://{secrets.token_hex(32)}"
        cwd = Path(container["workingDir"]) if container.get("workingDir") else run.directory
        if not argv:
            state.exit = start_error("no command specified")
            return
        try:
            cwd.mkdir(parents=True, exist_ok=True)
            fallback = container.get("terminationMessagePolicy") == "FallbackToLogsOnError"
            on_exit = self.wake.set if self.wake is not None else None
            limit = memory_limits(run.allocated).get(state.name, memory_limit_of(container))
            state.process = ContainerProcess(argv, env, cwd, log_path, limit, fallback, on_exit)
        except (FileNotFoundError, PermissionError, NotADirectoryError) as error:
            state.exit = start_error(f"exec: {argv[0]!r}: {error.strerror or error}")
            return
        if state.restarts == 0:
            record_event(
                run.store,
                pod,
                "Pulled",
                f'Container image "{state.image}" already present on machine',
            )
        record_event(run.store, pod, "Created", f"Created container {state.name}")
        record_event(run.store, pod, "Started", f"Started container {state.name}")

    def _resize(self, run: PodRun, pod: Obj, node: Obj) -> None:
        """Allocate a running pod's new resources when the node has room, else defer them."""
        wanted = desired(pod)
        if wanted == run.allocated:
            run.resize_pending = ""
            return
        used: dict[str, int] = {}
        for other in self.runs.values():
            active = not other.started or any(s.process for s in other.containers.values())
            if other is run or other.node != run.node or not active:
                continue
            for name, amount in requests_of(other.allocated).items():
                used[name] = used.get(name, 0) + amount
        problem = shortfall(pod, node, used)
        generation = int(pod["metadata"].get("generation") or 1)
        if problem is not None:
            if not run.resize_pending or run.resize_generation != generation:
                message = event_message(f"Pod resize {DEFERRED}", pod, problem)
                record_event(run.store, pod, "ResizeDeferred", message, "Warning")
            run.resize_pending, run.resize_generation = problem, generation
            return
        record_event(run.store, pod, "ResizeStarted", event_message("Pod resize started", pod))
        run.allocated, run.resize_pending = wanted, ""
        for name, limit in memory_limits(wanted).items():
            state = run.containers.get(name)
            if state is not None and state.process is not None:
                state.process.memory_limit = limit
        record_event(run.store, pod, "ResizeCompleted", event_message("Pod resize completed", pod))

    def _poll(self, run: PodRun, pod: Obj) -> None:
        policy = pod["spec"].get("restartPolicy", "Always")
        for container in pod["spec"]["containers"]:
            state = run.containers[container["name"]]
            if state.process is not None:
                state.process.enforce_memory()
                exit = state.process.reap()
                if exit is None:
                    continue
                state.process, state.exit = None, exit
            if state.exit is None:
                continue
            if policy == "Always" or (policy == "OnFailure" and state.exit.code != 0):
                try:
                    env = resolve_env(run.store, pod, container)
                except ContainerConfigError:
                    continue
                state.last_exit, state.exit = state.exit, None
                state.restarts += 1
                self._spawn(run, pod, container, env)

    def _terminate(self, run: PodRun, pod: Obj, grace: int) -> None:
        for state in run.containers.values():
            process = state.process
            if process is None:
                continue
            exit = process.reap()
            if exit is not None:
                state.process, state.exit = None, exit
            elif process.kill_deadline is None:
                process.kill_deadline = time.monotonic() + grace
                process.signal_group(signal.SIGTERM if grace > 0 else signal.SIGKILL)
                record_event(run.store, pod, "Killing", f"Stopping container {state.name}")
            elif time.monotonic() >= process.kill_deadline:
                process.signal_group(signal.SIGKILL)

    def _publish(self, run: PodRun, pod: Obj) -> None:
        """Write the pod's status when it changed; release it when its deletion completes."""
        new = copy.deepcopy(pod)
        status = new.setdefault("status", {})
        running = [s for s in run.containers.values() if s.process is not None]
        exits = [s.exit for s in run.containers.values() if s.exit is not None]
        all_exited = run.started and len(exits) == len(run.containers)
        deleting = bool(pod["metadata"].get("deletionTimestamp"))
        if all_exited or ((deleting or run.deadline_exceeded) and not running):
            status["phase"] = _exit_phase([e.code for e in exits] if all_exited else [1])
        elif run.started:
            status["phase"] = "Running"
        status["containerStatuses"] = [
            self._container_status(run, s) for s in run.containers.values()
        ]
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
        if new != pod or releasable("pods", new):
            put_or_release(run.store, "pods", new)

    def _container_status(self, run: PodRun, state: ContainerRun) -> dict[str, Any]:
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

    def _forget(self, uid: str) -> None:
        run = self.runs.pop(uid)
        for state in run.containers.values():
            if state.process is not None:
                state.process.kill_now()

    def kill_pod(self, uid: str) -> None:
        """Kill a pod's processes at once (node failure)."""
        run = self.runs.get(uid)
        if run is None:
            return
        for state in run.containers.values():
            if state.process is not None:
                state.process.kill_now()
                state.exit = state.process.reap() or start_error("killed")
                state.exit.code, state.exit.reason = 137, "Error"
                state.process = None

    def log_file(self, uid: str, container: str, previous: bool) -> Path | None:
        """The current (or previous) log file of a container, if it ever ran."""
        run = self.runs.get(uid)
        state = run.containers.get(container) if run else None
        if state is None or not state.logs:
            return None
        if previous:
            return state.logs[-2] if len(state.logs) > 1 else None
        return state.logs[-1]

    def is_running(self, uid: str, container: str) -> bool:
        """Whether the container's process is running now."""
        run = self.runs.get(uid)
        state = run.containers.get(container) if run else None
        return state is not None and state.process is not None

    def summary(self, node: str, store: str | None = None) -> dict[str, Any]:
        """The kubelet's `/stats/summary` for `node`: memory in use per running container.

        `store` keeps only the pods of one API server (an emulator tenant).
        """
        stamp = now_rfc3339()
        pods = []
        for run in list(self.runs.values()):
            if run.node != node or (store is not None and run.store.name != store):
                continue
            containers: list[dict[str, Any]] = []
            total = 0
            for state in list(run.containers.values()):
                process = state.process
                if process is None:
                    continue
                used = process.memory_in_use()
                total += used
                memory = {"time": stamp, "workingSetBytes": used, "rssBytes": used}
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

    def processes_alive(self) -> int:
        """Container process groups still alive."""
        return sum(
            1
            for run in self.runs.values()
            for state in run.containers.values()
            if state.process is not None and state.process.group_alive()
        )

    def stop(self) -> None:
        """Kill every container process."""
        for uid in list(self.runs):
            self._forget(uid)


def _past_deadline(run: PodRun, pod: Obj) -> bool:
    limit = pod["spec"].get("activeDeadlineSeconds")
    return limit is not None and time.time() >= parse_rfc3339(run.started_at) + int(limit)


def _ready(node: Obj) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


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
