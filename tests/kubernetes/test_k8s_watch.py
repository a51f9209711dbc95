"""The run's pod watch on its own: what a re-list keeps, and Jobs the executor is done with."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from k8s_ai_orchestrator.backends.kubernetes.watch import LIST_PAGE, PodWatch


def _pod(name: str, job: str, phase: str = "Running") -> dict[str, Any]:
    labels = {"k8s-ai/job": job, "k8s-ai/run-id": "r1"}
    return {"kind": "Pod", "metadata": {"name": name, "labels": labels}, "status": {"phase": phase}}


class _Listing:
    """A CoreV1Api whose pod list is whatever the test last set (watches are never opened),
    in pages by `limit` and `continue` as a real API server gives them (every page at the
    first one's version: `check_paged_list_continues_after_the_last_key`)."""

    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.version = 0
        self.pages = 0

    def list_namespaced_pod(self, namespace: str, **kwargs: Any) -> Any:
        assert not kwargs.get("watch")
        self.pages += 1
        token, limit = kwargs.get("_continue"), kwargs.get("limit") or len(self.pods)
        if token is None:
            self.version += 1
        start = int(token.split(":")[1]) if token else 0
        meta: dict[str, Any] = {"resourceVersion": str(self.version)}
        if start + limit < len(self.pods):
            meta["continue"] = f"{self.version}:{start + limit}"
        body = {"metadata": meta, "items": self.pods[start : start + limit]}
        return SimpleNamespace(data=json.dumps(body).encode())


def test_a_re_list_counts_only_vanished_pods_as_deleted() -> None:
    core = _Listing()
    watch = PodWatch(core, "default", "k8s-ai/run-id=r1")  # type: ignore[arg-type]
    core.pods = [_pod("a-0", "job-a"), _pod("b-0", "job-b")]
    watch._relist()
    core.pods = [_pod("a-0", "job-a")]
    watch._relist()  # b-0 vanished between the two lists; a-0 still runs
    assert [p["metadata"]["name"] for p in watch.pods("job-a")] == ["a-0"]
    assert watch.deleted_pods("job-a") == [] and watch.deleted("job-a") is None
    assert [p["metadata"]["name"] for p in watch.deleted_pods("job-b")] == ["b-0"]


def test_a_forgotten_job_is_dropped_and_stays_out_of_later_lists_and_events() -> None:
    core = _Listing()
    watch = PodWatch(core, "default", "k8s-ai/run-id=r1")  # type: ignore[arg-type]
    core.pods = [_pod("a-0", "job-a", "Succeeded"), _pod("b-0", "job-b")]
    watch._relist()
    watch._apply({"type": "DELETED", "object": _pod("a-1", "job-a", "Failed")})
    watch.forget("job-a")
    assert watch.pods("job-a") == [] and watch.deleted_pods("job-a") == []
    watch._relist()  # its pod is still listed (its Job is left to its TTL)
    watch._apply({"type": "MODIFIED", "object": _pod("a-0", "job-a", "Succeeded")})
    watch._apply({"type": "DELETED", "object": _pod("a-0", "job-a", "Succeeded")})
    assert watch.pods("job-a") == [] and watch.deleted("job-a") is None
    assert [p["metadata"]["name"] for p in watch.pods("job-b")] == ["b-0"]  # the others stay


def test_a_re_list_reads_a_page_at_a_time_and_keeps_only_the_jobs_still_followed() -> None:
    core = _Listing()
    watch = PodWatch(core, "default", "k8s-ai/run-id=r1")  # type: ignore[arg-type]
    core.pods = [_pod(f"done-{i}-0", f"done-{i}", "Succeeded") for i in range(1100)]
    core.pods += [_pod(f"live-{i}-0", f"live-{i}") for i in range(100)]
    for i in range(1100):
        watch.forget(f"done-{i}")
    assert watch._relist() == "1"  # the first page's version: the list's snapshot
    assert core.pages == -(-len(core.pods) // LIST_PAGE)
    assert len(watch._pods) == 100 and watch.pods("done-7") == []
    assert [p["metadata"]["name"] for p in watch.pods("live-99")] == ["live-99-0"]
