"""The kubelet: runs bound pods' containers as local process groups and reports their status.

It enforces memory limits by sampling the RSS of each container's process tree (OOMKilled,
exit 137), honours terminationGracePeriodSeconds (SIGTERM, then SIGKILL), restarts containers
per restartPolicy, keeps each container's current and previous log, and applies in-place
resizes of running pods when the node has room (`resize.py`). What it keeps about each pod,
and the status and `/stats/summary` it reports from that, are in `podreport.py`.

Example:
    >>> _ready({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    True
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .containers import (
    ContainerConfigError,
    ContainerProcess,
    bad_image,
    container_argv,
    memory_limit_of,
    resolve_env,
    start_error,
)
from .lifecycle import is_terminal, put_or_release, record_event, releasable
from .podreport import ContainerRun, PodRun, reported, stats_summary
from .resize import (
    deferred_event_prefix,
    desired,
    event_message,
    memory_limits,
    requests_of,
    shortfall,
)
from .store import ClusterState, Obj, Store, now_rfc3339, parse_rfc3339

# The emulator's own interpreter directory (a venv's bin) comes first on the containers' PATH,
# so commands such as `dagster api execute_step` resolve to the same installation.
_PATH = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])


# Prepares a pod's allocated DRA devices on its node: their environment, or why not yet.
PrepareClaims = Callable[[Obj, str], "dict[str, str] | str"]
NO_DRA_DRIVER = "no DRA driver is registered on this node (resource claims are not emulated)"


class Kubelet:
    """Runs the containers of every pod bound to a node of this emulator.

    A pod with `resourceClaims` starts only when `claims` (a DRA driver's kubelet plugin)
    prepares its devices; without one it waits, as on a kubelet with no such driver.

    Each pod is synced on its own, as the kubelet's per-pod workers do: an error syncing one
    goes to `on_error` (kept in `pod_errors` without one) and the other pods of the pass are
    synced all the same; the failed pod is tried again next pass.
    """

    def __init__(
        self,
        cluster: ClusterState,
        host: Store,
        workdir: Path,
        wake: threading.Event | None = None,
        claims: PrepareClaims | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        self.pod_errors: list[BaseException] = []
        self.on_error = on_error or self.pod_errors.append
        self.wake = wake  # set when a container exits, so the control loop runs at once
        self.claims = claims
        self.cluster = cluster
        self.host = host
        self.workdir = workdir
        self.runs: dict[str, PodRun] = {}

    def tick(self) -> None:
        """Start, watch, terminate and report the containers of every bound pod once."""
        ready = {n["metadata"]["name"]: n for n in self.host.list("nodes") if _ready(n)}
        bound, seen = [], set()
        for store in list(self.cluster.stores.values()):
            for pod in store.list("pods"):
                node = ready.get((pod.get("spec") or {}).get("nodeName", ""))
                if node is None:
                    continue  # its run (if any) is forgotten below, as on a lost node
                seen.add(pod["metadata"]["uid"])
                if not _finished(pod) or _running(self.runs.get(pod["metadata"]["uid"])):
                    bound.append((store, pod, node))  # else finished and published (`_sync`)
        # every new pod is admitted before any resize is weighed: a kubelet handles a pod's
        # arrival before a later resize of another pod, so that resize counts it as used
        for store, pod, node in bound:
            if pod["metadata"]["uid"] not in self.runs and not _finished(pod):
                self._isolated(self._admit, store, pod, node)
        for store, pod, node in bound:
            self._isolated(self._sync, store, pod, node)
        for uid in [uid for uid in self.runs if uid not in seen]:
            self._forget(uid)

    def _isolated(self, work: Callable[[Store, Obj, Obj], None], *args: Any) -> None:
        try:
            work(*args)
        except Exception as error:  # noqa: BLE001 - one pod's error holds up no other pod
            self.on_error(error)

    def _admit(self, store: Store, pod: Obj, node: Obj) -> None:
        self._new_run(store, pod).node = node["metadata"]["name"]

    def _sync(self, store: Store, pod: Obj, node: Obj) -> None:
        uid = pod["metadata"]["uid"]
        run = self.runs.get(uid)
        if _finished(pod) and not _running(run):
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
        devices = self._prepare_claims(run, pod)
        if devices is None:
            return
        waiting: dict[str, tuple[str, str]] = {}
        envs: dict[str, dict[str, str]] = {}
        for container in pod["spec"]["containers"]:
            name, image = container["name"], container.get("image", "")
            if bad_image(image):
                waiting[name] = self._pull_failure(run, pod, name, image)
                continue
            try:
                claimed = (container.get("resources") or {}).get("claims")
                envs[name] = {
                    **resolve_env(run.store, pod, container),
                    **(devices if claimed else {}),
                }
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

    def _prepare_claims(self, run: PodRun, pod: Obj) -> dict[str, str] | None:
        """The environment of the pod's prepared DRA devices ({} without claims), or None
        while they cannot be prepared (one `FailedPrepareDynamicResources` event per reason)."""
        if not pod["spec"].get("resourceClaims"):
            return {}
        prepared = NO_DRA_DRIVER if self.claims is None else self.claims(pod, run.node)
        if isinstance(prepared, dict):
            return prepared
        waiting = {c["name"]: ("ContainerCreating", prepared) for c in pod["spec"]["containers"]}
        if run.waiting != waiting:
            message = f"Failed to prepare dynamic resources: {prepared}"
            record_event(run.store, pod, "FailedPrepareDynamicResources", message, "Warning")
        run.waiting = waiting
        return None

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
            state.sample = None  # a new container: cAdvisor knows nothing of it yet
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
                message = event_message(deferred_event_prefix(problem), pod, problem)
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
        new = reported(run, pod)
        if new != pod or releasable("pods", new):
            put_or_release(run.store, "pods", new)

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
        return stats_summary(list(self.runs.values()), node, store)

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


def _finished(pod: Obj) -> bool:
    """Terminal and not being deleted: nothing left for the kubelet to run or report."""
    return is_terminal(pod) and not pod["metadata"].get("deletionTimestamp")


def _running(run: PodRun | None) -> bool:
    """Whether a pod's run still has a container process to watch."""
    return run is not None and any(s.process for s in run.containers.values())


def _ready(node: Obj) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
