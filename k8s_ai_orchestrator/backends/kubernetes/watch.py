"""One list+watch of a run's pods per tenant namespace, kept in memory for `status()`.

A background thread watches the run's pods: its first request is one watch without a
resourceVersion (the server sends what exists, then every change); each renewal resumes from
the last resourceVersion seen. All steps of the run in that namespace share it, so asking a
step's status costs no API request. A 410 Gone (the resourceVersion is too old) re-lists and
watches from the list; any other error reconnects after a backoff that doubles up to 30 s.
Pods that vanish between two lists count as deleted. A Job the executor is done with is
`forget`-ten: its pods' states are dropped and its later events passed over, so what the watch
holds follows the steps in flight, not every step the run has had.

Example:
    >>> watch = PodWatch(core_api, "default", "k8s-ai/run-id=r1")  # doctest: +SKIP
    >>> watch.start(); watch.pods("k8s-ai-0f3c...-0")  # doctest: +SKIP
    []
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from .jobs import JOB_LABEL
from .status import carry_disruption

Pod = Mapping[str, Any]
_MAX_BACKOFF_S = 30.0
LIST_PAGE = 500  # pods per list request of a re-list (the page size client-go's reflectors use)


class PodWatch:
    """The pods of one run in one namespace, as last seen by a list+watch.

    Args:
        core: the tenant's CoreV1Api.
        namespace: the namespace the run's Jobs are created in.
        selector: label selector of the run's pods.
        backoff_s: first wait after a failed request; doubles up to 30 s.
        timeout_s: server-side timeout of one watch request (it is then renewed).
        sleep: waits between reconnects; default: wait on the stop event, so `stop()` is
            not held up by a backoff.
        logger: where reconnects are reported.
    """

    def __init__(
        self,
        core: CoreV1Api,
        namespace: str,
        selector: str,
        *,
        backoff_s: float = 1.0,
        timeout_s: int = 300,
        sleep: Callable[[float], None] | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self._core = core
        self.namespace = namespace
        self._selector = selector
        self._backoff_s = backoff_s
        self._timeout_s = timeout_s
        self._stopped = threading.Event()
        self._sleep = sleep or self._stopped.wait
        self._log = logger or logging.getLogger(__name__)
        self._lock = threading.Condition()
        self._pods: dict[str, Pod] = {}
        self._by_job: dict[str, set[str]] = {}  # job → names of its live pods (an index)
        self._listeners: list[Callable[[str], None]] = []
        self._deleted: dict[str, Pod] = {}
        self._gone: dict[str, dict[str, Pod]] = {}  # job → pod name → its last state
        self._forgotten: set[str] = set()  # Jobs whose pods are no longer kept (`forget`)
        self._synced = threading.Event()
        self._version = ""  # where the first watch starts ("": the server sends what exists)
        self._response: Any = None
        self._thread = threading.Thread(
            target=self._run, name=f"k8s-ai-watch-{namespace}", daemon=True
        )

    def start(self, *, list_first: Callable[[Callable[[], str]], str] | None = None) -> None:
        """Start watching. `list_first(list_pods)`: list the pods in the caller's thread
        before the watch starts (through the caller's retries), so a run whose pods exist
        already is never read as having none while the first watch's ADDED events are still
        on their way."""
        if list_first is not None:
            self._version = list_first(self._relist)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching; returns once the thread has exited (or after 5 s)."""
        self._stopped.set()
        _shutdown(self._response)
        self._thread.join(timeout=5)

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def on_change(self, callback: Callable[[str], None]) -> None:
        """Call `callback(job)` (on the watch thread) for each change to one of a Job's pods."""
        self._listeners.append(callback)

    def pods(self, job: str) -> list[Pod]:
        """Live pods of a Job, oldest first."""
        with self._lock:
            found = [self._pods[name] for name in self._by_job.get(job, ())]
        return sorted(found, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp", ""))

    def deleted(self, job: str) -> Pod | None:
        """The last state of a Job's pod that was deleted, if one was."""
        with self._lock:
            return self._deleted.get(job)

    def deleted_pods(self, job: str) -> list[Pod]:
        """The last state of every deleted pod of a Job (a gang has several)."""
        with self._lock:
            return list(self._gone.get(job, {}).values())

    def forget(self, job: str) -> None:
        """Drop what is kept of the Job's pods and pass over their later events (the
        executor is done with its attempt; the Job itself is left to its TTL)."""
        with self._lock:
            self._forgotten.add(job)
            for name in self._by_job.pop(job, ()):
                self._pods.pop(name, None)
            self._deleted.pop(job, None)
            self._gone.pop(job, None)

    def _run(self) -> None:
        # The first request is a watch without a resourceVersion: the server sends the pods
        # that exist (none yet, for a new run) as ADDED, then every change, so no list is
        # needed; after `list_first` it starts from that list's version instead. Later
        # connections resume from the last version seen, or re-list.
        version: str | None = self._version
        backoff = self._backoff_s
        while not self._stopped.is_set():
            try:
                if version is None or (not version and self._known()):
                    version = self._relist()
                version = self._watch(version) or None
                backoff = self._backoff_s
            except ApiException as error:
                if error.status == 410:
                    self._log.info("watch of %s expired (410 Gone); re-listing", self.namespace)
                    version = None
                    continue
                self._log.warning(
                    "watch of pods in %s failed (%s %s); reconnecting in %.1fs",
                    self.namespace,
                    error.status,
                    error.reason,
                    backoff,
                )
                backoff = self._pause(backoff)
            except Exception as error:  # connection reset, protocol error, timeout, bad JSON
                if self._stopped.is_set():
                    return
                self._log.warning(
                    "watch of pods in %s lost (%s); reconnecting in %.1fs",
                    self.namespace,
                    type(error).__name__,
                    backoff,
                )
                backoff = self._pause(backoff)

    def _known(self) -> bool:
        """Whether any pod was seen (a reconnect must then re-list to find vanished ones)."""
        with self._lock:
            return bool(self._pods or self._gone)

    def _pause(self, backoff: float) -> float:
        self._sleep(backoff)
        return min(backoff * 2, _MAX_BACKOFF_S)

    def _relist(self) -> str:
        """List the run's pods, `LIST_PAGE` at a time (`limit`/`continue`), passing over those
        of forgotten Jobs page by page: a re-list late in a run of 10,000 steps holds one page
        and the pods in flight, not every pod the run made. The version watched from is the
        first page's (a server's pages are one snapshot at it; a continue token too old to use
        is a 410, which re-lists)."""
        listed: dict[str, Pod] = {}
        version, token = "", None
        while True:
            response = self._core.list_namespaced_pod(
                self.namespace,
                label_selector=self._selector,
                limit=LIST_PAGE,
                _continue=token,
                _preload_content=False,
            )
            page = json.loads(response.data)
            meta = page.get("metadata") or {}
            version = version or str(meta["resourceVersion"])
            with self._lock:
                for p in page.get("items") or ():
                    if p.get("kind", "Pod") == "Pod" and _job_of(p) not in self._forgotten:
                        listed[p["metadata"]["name"]] = p
            if not (token := meta.get("continue")):
                break
        with self._lock:
            fresh = {n: p for n, p in listed.items() if _job_of(p) not in self._forgotten}
            fresh = {name: carry_disruption(self._pods.get(name), p) for name, p in fresh.items()}
            for name, pod in self._pods.items():
                if name not in fresh:  # vanished between the two lists: deleted
                    self._deleted[_job_of(pod)] = pod
                    self._gone.setdefault(_job_of(pod), {})[name] = pod
            changed = {_job_of(p) for p in [*self._pods.values(), *fresh.values()]}
            self._pods = fresh
            self._by_job = {}
            for name, pod in fresh.items():
                self._by_job.setdefault(_job_of(pod), set()).add(name)
            self._lock.notify_all()
        self._synced.set()
        self._tell(changed)
        return version

    def _watch(self, version: str) -> str:
        self._response = self._core.list_namespaced_pod(
            self.namespace,
            label_selector=self._selector,
            watch=True,
            resource_version=version or None,
            allow_watch_bookmarks=True,
            timeout_seconds=self._timeout_s,
            _preload_content=False,
            _request_timeout=(10, self._timeout_s + 30),
        )
        self._synced.set()
        try:
            for line in iter_resp_lines(self._response):
                if self._stopped.is_set():
                    break
                if line.strip():
                    version = self._apply(json.loads(line)) or version
        finally:
            response, self._response = self._response, None
            response.release_conn()
        return version

    def _apply(self, event: Mapping[str, Any]) -> str | None:
        kind, pod = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            raise ApiException(status=int(pod.get("code") or 500), reason=pod.get("message"))
        version = (pod.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            return version
        if pod.get("kind", "Pod") != "Pod":
            return version  # only pods are watched; tolerate a server that streams more
        name, job = pod["metadata"]["name"], _job_of(pod)
        with self._lock:
            if job in self._forgotten:
                return version
            pod = carry_disruption(self._pods.get(name), pod)
            if kind == "DELETED":
                self._pods.pop(name, None)
                self._by_job.get(job, set()).discard(name)
                self._deleted[job] = pod
                self._gone.setdefault(job, {})[name] = pod
            else:
                self._pods[name] = pod
                self._by_job.setdefault(job, set()).add(name)
            self._lock.notify_all()
        self._tell({job})
        return version

    def _tell(self, jobs: set[str]) -> None:
        for job in jobs:
            for listener in self._listeners:
                listener(job)


class PodWatches:
    """One `PodWatch` per tenant, namespace and run, started on first use.

    Args:
        selector_of: the label selector of a run's pods.
        backoff_s, timeout_s, sleep, logger: as for `PodWatch`.
    """

    def __init__(
        self,
        selector_of: Callable[[str], str],
        *,
        backoff_s: float,
        timeout_s: int,
        sleep: Callable[[float], None] | None,
        logger: logging.Logger,
    ) -> None:
        self._selector_of = selector_of
        self._backoff_s = backoff_s
        self._timeout_s = timeout_s
        self._sleep = sleep
        self._log = logger
        self._watches: dict[tuple[str, str, str], PodWatch] = {}
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()

    def of_run(
        self,
        tenant: str,
        namespace: str,
        run_id: str,
        core: CoreV1Api,
        *,
        list_first: Callable[[Callable[[], str]], str] | None = None,
    ) -> PodWatch:
        """The watch of the run's pods in the tenant's namespace. `list_first`: as for
        `PodWatch.start`, when this starts the watch (a resumed run worker adopting Jobs
        whose pods exist already)."""
        key = (tenant, namespace, run_id)
        with self._lock:
            watch = self._watches.get(key)
            if watch is None:
                watch = PodWatch(
                    core,
                    namespace,
                    self._selector_of(run_id),
                    backoff_s=self._backoff_s,
                    timeout_s=self._timeout_s,
                    sleep=self._sleep,
                    logger=self._log,
                )
                for listener in self._listeners:
                    watch.on_change(listener)
                watch.start(list_first=list_first)
                self._watches[key] = watch
        return watch

    def on_change(self, callback: Callable[[str], None]) -> None:
        """`callback(job)` on each pod event of every watch, those started later included."""
        with self._lock:
            self._listeners.append(callback)
            watches = list(self._watches.values())
        for watch in watches:
            watch.on_change(callback)

    def stop_all(self) -> None:
        with self._lock:
            watches, self._watches = list(self._watches.values()), {}
        for watch in watches:
            watch.stop()


def _job_of(pod: Pod) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(JOB_LABEL) or labels.get("job-name") or "")


def _shutdown(response: Any) -> None:
    """Unblock a thread reading a watch response by shutting its socket down."""
    connection = getattr(response, "connection", None)
    sock = getattr(connection, "sock", None)
    if sock is not None:
        try:
            sock.shutdown(2)
        except OSError:
            pass
