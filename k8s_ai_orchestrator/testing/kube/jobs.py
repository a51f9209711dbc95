"""The Job controller (batch/v1), with the conditions Kubernetes ≥ 1.31 sets.

parallelism/completions, Indexed completion mode, backoffLimit, podFailurePolicy (FailJob,
Ignore, Count on exit codes and pod conditions), activeDeadlineSeconds, suspend and
ttlSecondsAfterFinished. A failing Job gets FailureTarget, then Failed once its pods are gone;
a succeeding one SuccessCriteriaMet, then Complete. Pods carry the job-tracking finalizer until
the controller has counted them, so deleted and evicted pods are counted too.

Example:
    >>> _format_indexes({0, 1, 2, 5})
    '0-2,5'
"""

from __future__ import annotations

import copy
import time
from typing import Any

from .api import ObjectApi
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
from .store import ApiError, Obj, Store, now_rfc3339, parse_rfc3339

CONTROLLER = "job-controller"
INDEX_KEY = "batch.kubernetes.io/job-completion-index"
_PODS = RESOURCES[("", "pods")]


def _format_indexes(indexes: set[int]) -> str:
    """As the Job controller writes them: runs of 3 or more as "0-2", a pair as "0,1"."""
    runs: list[list[int]] = []
    for index in sorted(indexes):
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    parts = [
        str(first) if first == last else f"{first}{',' if last == first + 1 else '-'}{last}"
        for first, last in runs
    ]
    return ",".join(parts)


def _parse_indexes(text: str | None) -> set[int]:
    found: set[int] = set()
    for part in (text or "").split(","):
        if "-" in part:
            low, high = part.split("-")
            found.update(range(int(low), int(high) + 1))
        elif part:
            found.add(int(part))
    return found


def _condition(job: Obj, type_: str) -> dict[str, Any] | None:
    conditions = (job.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == type_ and c["status"] == "True"), None)


def failure_policy_match(job: Obj, pod: Obj) -> tuple[str, str] | None:
    """(action, message) of the first podFailurePolicy rule matching a failed pod."""
    rules = ((job["spec"].get("podFailurePolicy") or {}).get("rules")) or []
    pod_name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for index, rule in enumerate(rules):
        action = rule["action"]
        on_codes = rule.get("onExitCodes")
        if on_codes:
            for status in statuses:
                code = ((status.get("state") or {}).get("terminated") or {}).get("exitCode")
                if not code or on_codes.get("containerName") not in (None, status["name"]):
                    continue
                if (code in on_codes["values"]) == (on_codes["operator"] == "In"):
                    return action, (
                        f"Container {status['name']} for pod {pod_name} failed with exit code "
                        f"{code} matching {action} rule at index {index}"
                    )
        for pattern in rule.get("onPodConditions") or []:
            for condition in (pod.get("status") or {}).get("conditions") or []:
                if condition["type"] == pattern["type"] and condition["status"] == pattern.get(
                    "status", "True"
                ):
                    return action, (
                        f"Pod {pod_name} has condition {pattern['type']} matching {action} rule "
                        f"at index {index}"
                    )
    return None


class JobController:
    """Reconciles every Job of one API server."""

    def __init__(self, api: ObjectApi) -> None:
        self.api = api
        self.store: Store = api.store
        self._by_owner: dict[str, list[Obj]] = {}  # owner uid → its pods, in the store's order
        self._indexed_at = -1  # `store.writes("pods")` when `_by_owner` was built

    def tick(self) -> None:
        """Reconcile every Job once."""
        jobs = {job["metadata"]["uid"]: job for job in self.store.list("jobs")}
        for pod in self.store.list("pods"):
            refs = pod["metadata"].get("ownerReferences") or []
            tracked = JOB_TRACKING_FINALIZER in (pod["metadata"].get("finalizers") or [])
            if tracked and not any(ref.get("uid") in jobs for ref in refs):
                self._untrack(pod)
        for job in jobs.values():
            if _condition(job, "Complete") or _condition(job, "Failed"):
                self._sync_finished(job)
            else:
                self._sync(job)

    def _sync_finished(self, job: Obj) -> None:
        """A finished Job only releases its pods' finalizers and waits for its TTL."""
        for pod in self._owned(job):
            if is_terminal(pod) and JOB_TRACKING_FINALIZER in (
                pod["metadata"].get("finalizers") or []
            ):
                self._untrack(pod)
        self._expire(job)

    def _owned(self, job: Obj) -> list[Obj]:
        """The Job's pods, in the store's order, from an index of the pods by owner that is
        built again only after a pod was written (a pass over thousands of Jobs reads the pods
        once, not once per Job)."""
        writes = self.store.writes("pods")
        if self._indexed_at != writes:
            self._indexed_at, self._by_owner = writes, {}
            for pod in self.store.list("pods"):
                for uid in {
                    ref.get("uid", "") for ref in pod["metadata"].get("ownerReferences") or []
                }:
                    self._by_owner.setdefault(uid, []).append(pod)
        namespace = job["metadata"]["namespace"]
        pods = self._by_owner.get(job["metadata"]["uid"], [])
        return [pod for pod in pods if pod["metadata"].get("namespace") == namespace]

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
            self.store.put("jobs", new)

    def _count_finished(self, job: Obj, pods: list[Obj]) -> str | None:
        """Count newly terminated pods once (dropping their finalizer); a FailJob message."""
        status, verdict = job["status"], None
        indexed = job["spec"].get("completionMode") == "Indexed"
        done = _parse_indexes(status.get("completedIndexes"))
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
            status["completedIndexes"] = _format_indexes(done)
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
            return _parse_indexes(status.get("completedIndexes")) >= set(range(completions or 0))
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
            done = _parse_indexes(status.get("completedIndexes"))
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
