"""The Job controller (batch/v1), with the conditions Kubernetes ≥ 1.31 sets.

parallelism/completions, Indexed completion mode, backoffLimit, podFailurePolicy (FailJob,
Ignore, Count on exit codes and pod conditions), activeDeadlineSeconds, suspend and
ttlSecondsAfterFinished. A failing Job gets FailureTarget, then Failed once its pods are gone;
a succeeding one SuccessCriteriaMet, then Complete. Pods carry the job-tracking finalizer until
the controller has counted them, so deleted and evicted pods are counted too.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from .api import ObjectApi
from .jobpolicy import failure_policy_match, format_indexes, parse_indexes
from .lifecycle import (
    JOB_TRACKING_FINALIZER,
    delete_object,
    delete_pod,
    is_terminal,
    put_or_release,
    record_event,
    set_condition,
)
from .resources import RESOURCES
from .store import ApiError, Change, Obj, Store, now_rfc3339, parse_rfc3339

CONTROLLER = "job-controller"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
_PODS = RESOURCES[("", "pods")]


def _key(obj: Obj) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _owners(pod: Obj) -> set[str]:
    return {ref.get("uid", "") for ref in (pod.get("metadata") or {}).get("ownerReferences") or []}


def _condition(job: Obj, type_: str) -> dict[str, Any] | None:
    conditions = (job.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_ and c["status"] == "True"), None)


class JobController:
    """Reconciles the Jobs of one API server from what changed, as the real controller's work
    queue does: a pass syncs the Jobs that were written, whose pods were written, or whose
    timer (activeDeadlineSeconds, ttlSecondsAfterFinished, a pod it failed to create) is due;
    the first pass, and a pass after the store's history was compacted past the last one it
    read, syncs every Job."""

    def __init__(self, api: ObjectApi) -> None:
        self.api = api
        self.store: Store = api.store
        self._by_owner: dict[str, dict[tuple[str, str], Obj]] = {}  # owner uid → its pods
        self._indexed_rv: int | None = None  # the resourceVersion `_by_owner` is current to
        self._read_to: int | None = None  # the resourceVersion whose changes were taken in
        self._jobs: dict[str, tuple[str, str]] = {}  # uid → (namespace, name), in store order
        self._due: dict[str, float] = {}  # uid → when the Job must be synced again

    def tick(self) -> None:
        """Sync every Job that needs it once."""
        dirty, candidates = self._changed()
        now = time.time()
        dirty.update(uid for uid, due in self._due.items() if due <= now)
        for pod in candidates:  # a tracked pod whose Job is gone is released
            tracked = JOB_TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or [])
            if tracked and not _owners(pod) & self._jobs.keys():
                self._untrack(pod)
        for uid in [uid for uid in self._jobs if uid in dirty] if dirty else ():
            namespace, name = self._jobs[uid]
            job = self.store.get("jobs", namespace, name)
            if job is None or job["metadata"]["uid"] != uid:
                continue
            self._due.pop(uid, None)
            if _condition(job, "Complete") or _condition(job, "Failed"):
                self._sync_finished(job)
            else:
                self._sync(job)

    def _changed(self) -> tuple[set[str], list[Obj]]:
        """The uids of the Jobs written, or whose pods were written, since the last pass, and
        the pods written (current versions) that may have lost their Job."""
        read_from, self._read_to = self._read_to, self.store.cluster.current_rv
        try:
            changes = None if read_from is None else self.store.changes_since(read_from)
        except ApiError:  # 410: the history moved on; start again from a full list
            changes = None
        if changes is None:
            jobs = self.store.list("jobs")
            self._jobs = {j["metadata"]["uid"]: _key(j) for j in jobs}
            return set(self._jobs), self.store.list("pods")
        dirty: set[str] = set()
        pods: dict[tuple[str, str], None] = {}
        # the index by owner takes in the same changes (one read of the history a pass)
        indexed = (
            self._indexed_rv is not None and read_from is not None and self._indexed_rv >= read_from
        )
        for change in changes:
            meta = change.obj["metadata"]
            if change.resource == "jobs":
                if change.type == "DELETED":
                    self._jobs.pop(meta["uid"], None)
                    self._due.pop(meta["uid"], None)
                    pods.update((_key(pod), None) for pod in self._pods_of(meta["uid"]))
                else:
                    self._jobs.setdefault(meta["uid"], _key(change.obj))
                    dirty.add(meta["uid"])
            elif change.resource == "pods":
                dirty |= _owners(change.obj) | _owners(change.old or {})
                pods[_key(change.obj)] = None
                if indexed:
                    self._index(change)
        if indexed:  # every change up to the pass's read is in (any after it stay in)
            self._indexed_rv = max(self._read_to, self._indexed_rv or 0)
        current = [self.store.get("pods", *key) for key in pods]
        return dirty, [pod for pod in current if pod is not None]

    def _schedule(self, job: Obj) -> None:
        """When `job` must be synced again though nothing of it changes: its TTL after it
        finished, or its activeDeadlineSeconds while it runs."""
        uid, spec, status = job["metadata"]["uid"], job["spec"], job.get("status") or {}
        finished = _condition(job, "Complete") or _condition(job, "Failed")
        due = None
        if finished is not None:
            ttl = spec.get("ttlSecondsAfterFinished")
            if ttl is not None and not job["metadata"].get("deletionTimestamp"):
                due = parse_rfc3339(finished["lastTransitionTime"]) + ttl
        elif status.get("startTime") and spec.get("activeDeadlineSeconds") is not None:
            due = parse_rfc3339(status["startTime"]) + spec["activeDeadlineSeconds"]
        if due is not None:
            self._due[uid] = min(due, self._due.get(uid, due))

    def _sync_finished(self, job: Obj) -> None:
        """A finished Job only releases its pods' finalizers and waits for its TTL."""
        for pod in self._owned(job):
            if is_terminal(pod) and JOB_TRACKING_FINALIZER in (
                pod["metadata"].get("finalizers") or []
            ):
                self._untrack(pod)
        self._expire(job)
        self._schedule(job)

    def _owned(self, job: Obj) -> list[Obj]:
        """The Job's pods, in the store's order."""
        namespace = job["metadata"]["namespace"]
        pods = self._pods_of(job["metadata"]["uid"])
        return [pod for pod in pods if pod["metadata"].get("namespace") == namespace]

    def _pods_of(self, uid: str) -> list[Obj]:
        """The pods that name `uid` as an owner, in the store's order, from an index by owner
        kept current from the store's history (built from a full list only at first and after
        the history was compacted), so a pass over many Jobs never reads every pod."""
        current = self.store.cluster.current_rv
        if self._indexed_rv != current:
            try:
                changes = (
                    None if self._indexed_rv is None else self.store.changes_since(self._indexed_rv)
                )
            except ApiError:  # 410: the history moved on
                changes = None
            if changes is None:
                self._by_owner = {}
                for pod in self.store.list("pods"):
                    for owner in _owners(pod):
                        self._by_owner.setdefault(owner, {})[_key(pod)] = pod
            else:
                for change in changes:
                    if change.resource == "pods":
                        self._index(change)
            self._indexed_rv = max(current, self._indexed_rv or 0)
        return list(self._by_owner.get(uid, {}).values())

    def _index(self, change: Change) -> None:
        """Apply one pod write to the index once, in the history's order (a modified pod keeps
        its place, as in the store); a write the index already took in is passed over."""
        if self._indexed_rv is not None and change.rv <= self._indexed_rv:
            return
        self._indexed_rv = change.rv
        key, now = _key(change.obj), set() if change.type == "DELETED" else _owners(change.obj)
        for owner in _owners(change.old or {}) - now:
            self._by_owner.get(owner, {}).pop(key, None)
        for owner in now:
            self._by_owner.setdefault(owner, {})[key] = change.obj

    def _untrack(self, pod: Obj) -> None:
        pod = copy.deepcopy(pod)
        finalizers = pod["metadata"].get("finalizers") or []
        pod["metadata"]["finalizers"] = [f for f in finalizers if f != JOB_TRACKING_FINALIZER]
        put_or_release(self.store, "pods", pod)

    def _sync(self, job: Obj) -> None:
        new = copy.deepcopy(job)
        new.setdefault("status", {})
        pods = self._owned(job)
        verdict = self._count_finished(new, pods)
        self._decide(new, pods, verdict)
        if not new["metadata"].get("deletionTimestamp"):
            self._finish_or_run(new, pods)
        self._refresh_counts(new)
        if new != job:
            new = self.store.put("jobs", new)
        self._schedule(new)

    def _count_finished(self, job: Obj, pods: list[Obj]) -> str | None:
        """Count newly terminated pods once (dropping their finalizer); a FailJob message."""
        status, verdict = job["status"], None
        indexed = job["spec"].get("completionMode") == "Indexed"
        done = parse_indexes(status.get("completedIndexes"))
        for pod in pods:
            if not is_terminal(pod) or JOB_TRACKING_FINALIZER not in (
                pod["metadata"].get("finalizers") or []
            ):
                continue
            if pod["status"]["phase"] == "Succeeded":
                status["succeeded"] = status.get("succeeded", 0) + 1
                if indexed:
                    done.add(int(pod["metadata"].get("annotations", {}).get(INDEX_KEY, 0)))
            else:
                action, message = failure_policy_match(job, pod) or ("Count", "")
                if action == "FailJob":
                    verdict = verdict or message
                if action != "Ignore":
                    status["failed"] = status.get("failed", 0) + 1
            self._untrack(pod)
        if indexed and done:
            status["completedIndexes"] = format_indexes(done)
        return verdict

    def _decide(self, job: Obj, pods: list[Obj], fail_message: str | None) -> None:
        status, spec = job["status"], job["spec"]
        if _condition(job, "FailureTarget") or _condition(job, "SuccessCriteriaMet"):
            return
        restarts = sum(
            cs.get("restartCount", 0)
            for pod in pods
            if not is_terminal(pod)
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
        )
        started = status.get("startTime")
        deadline = spec.get("activeDeadlineSeconds")
        if fail_message:
            self._target(job, "FailureTarget", "PodFailurePolicy", fail_message)
        elif status.get("failed", 0) + restarts > spec.get("backoffLimit", 6):
            self._target(
                job,
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
            )
        elif started and deadline is not None and time.time() >= parse_rfc3339(started) + deadline:
            self._target(
                job,
                "FailureTarget",
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
            )
        elif self._succeeded(job, pods):
            self._target(
                job,
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            )

    def _succeeded(self, job: Obj, pods: list[Obj]) -> bool:
        spec, status = job["spec"], job["status"]
        completions = spec.get("completions")
        if spec.get("completionMode") == "Indexed":
            return parse_indexes(status.get("completedIndexes")) >= set(range(completions or 0))
        if completions is None:
            active = [p for p in pods if not is_terminal(p)]
            return status.get("succeeded", 0) > 0 and not active
        return status.get("succeeded", 0) >= completions

    def _target(self, job: Obj, type_: str, reason: str, message: str) -> None:
        set_condition(job["status"], type_, "True", reason, message)
        event_type = "Warning" if type_ == "FailureTarget" else "Normal"
        record_event(
            self.store,
            job,
            reason if type_ == "FailureTarget" else "Completed",
            message if type_ == "FailureTarget" else "Job completed",
            event_type,
            CONTROLLER,
        )

    def _finish_or_run(self, job: Obj, pods: list[Obj]) -> None:
        status = job["status"]
        target = _condition(job, "FailureTarget") or _condition(job, "SuccessCriteriaMet")
        active = [
            p for p in pods if not is_terminal(p) and not p["metadata"].get("deletionTimestamp")
        ]
        if target is not None or job["spec"].get("suspend"):
            for pod in active:
                delete_pod(self.store, pod)
                record_event(
                    self.store,
                    job,
                    "SuccessfulDelete",
                    f"Deleted pod: {pod['metadata']['name']}",
                    component=CONTROLLER,
                )
            if job["spec"].get("suspend") and target is None:
                set_condition(status, "Suspended", "True", "JobSuspended", "Job suspended")
            elif target is not None and not [p for p in self._owned(job) if not is_terminal(p)]:
                final = "Failed" if target["type"] == "FailureTarget" else "Complete"
                set_condition(
                    status, final, "True", target.get("reason", ""), target.get("message", "")
                )
                if final == "Complete":
                    status["completionTime"] = now_rfc3339()
            return
        if _condition(job, "Suspended"):
            set_condition(status, "Suspended", "False", "JobResumed", "Job resumed")
        status.setdefault("startTime", now_rfc3339())
        if job["spec"].get("podReplacementPolicy") == "Failed":  # wait for terminating pods
            active = [p for p in pods if not is_terminal(p)]
        for index in self._missing(job, active):
            self._create_pod(job, index)

    def _missing(self, job: Obj, active: list[Obj]) -> list[int | None]:
        spec, status = job["spec"], job["status"]
        room = spec.get("parallelism", 1) - len(active)
        if room <= 0:
            return []
        completions = spec.get("completions")
        if spec.get("completionMode") == "Indexed":
            busy = {int(p["metadata"].get("annotations", {}).get(INDEX_KEY, -1)) for p in active}
            done = parse_indexes(status.get("completedIndexes"))
            todo = [i for i in range(completions or 0) if i not in busy and i not in done]
            return list(todo[:room])
        if completions is None:
            return [] if status.get("succeeded") else [None] * room
        remaining = completions - status.get("succeeded", 0) - len(active)
        return [None] * max(0, min(room, remaining))

    def _create_pod(self, job: Obj, index: int | None) -> None:
        meta, template = job["metadata"], copy.deepcopy(job["spec"]["template"])
        pod_meta = template.setdefault("metadata", {})
        pod_meta.pop("name", None)  # the controller names pods itself, whatever the template says
        pod_meta["generateName"] = f"{meta['name']}-" + (f"{index}-" if index is not None else "")
        pod_meta["finalizers"] = [JOB_TRACKING_FINALIZER]
        pod_meta["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        if index is not None:
            pod_meta.setdefault("annotations", {})[INDEX_KEY] = str(index)
            pod_meta.setdefault("labels", {})[INDEX_KEY] = str(index)
            ref = {
                "fieldRef": {
                    "apiVersion": "v1",
                    "fieldPath": f"metadata.annotations['{INDEX_KEY}']",
                }
            }
            for container in template["spec"]["containers"]:
                container.setdefault("env", []).insert(
                    0, {"name": "JOB_COMPLETION_INDEX", "valueFrom": ref}
                )
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": template["spec"]}
        try:
            pod = self.api.create(_PODS, meta["namespace"], body, {})
        except ApiError as error:
            self._due[meta["uid"]] = 0.0  # tried again next pass, as the real one retries
            record_event(
                self.store,
                job,
                "FailedCreate",
                f"Error creating: {error.message}",
                "Warning",
                CONTROLLER,
            )
            return
        record_event(
            self.store,
            job,
            "SuccessfulCreate",
            f"Created pod: {pod['metadata']['name']}",
            component=CONTROLLER,
        )

    def _refresh_counts(self, job: Obj) -> None:
        pods = self._owned(job)
        status = job["status"]
        active = [
            p for p in pods if not is_terminal(p) and not p["metadata"].get("deletionTimestamp")
        ]
        ready = [
            p
            for p in active
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions") or []
            )
        ]
        if active:
            status["active"] = len(active)
        else:
            status.pop("active", None)
        status["ready"] = len(ready)
        status["terminating"] = len(
            [p for p in pods if p["metadata"].get("deletionTimestamp") and not is_terminal(p)]
        )
        status["uncountedTerminatedPods"] = {}

    def _expire(self, job: Obj) -> None:
        ttl = job["spec"].get("ttlSecondsAfterFinished")
        if ttl is None or job["metadata"].get("deletionTimestamp"):
            return
        finished = _condition(job, "Complete") or _condition(job, "Failed") or {}
        if time.time() >= parse_rfc3339(finished["lastTransitionTime"]) + ttl:
            delete_object(
                self.store,
                "jobs",
                job["metadata"]["namespace"],
                job["metadata"]["name"],
                propagation="Background",
            )
