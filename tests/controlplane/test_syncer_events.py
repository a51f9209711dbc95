"""The tenant syncer's event copy, without a plane: which host events reach a tenant, and how."""

from __future__ import annotations

from typing import Any

from k8s_ai_orchestrator.testing.controlplane.syncer.events import EventSync, PodRef

HOST_POD = "train-abc12-x-default-x-team-a"


def _never(error: Exception) -> None:
    raise AssertionError(f"no write was to fail here: {error}")


def host_event(uid: str, version: str, *, kind: str = "Pod", name: str = HOST_POD) -> Any:
    return {
        "metadata": {"name": f"{name}.{uid}", "uid": uid, "resourceVersion": version},
        "involvedObject": {"kind": kind, "name": name, "uid": "host-uid-1"},
        "reason": "FailedScheduling",
        "message": "0/2 nodes are available: 1 Insufficient cpu.",
        "type": "Warning",
        "count": 1,
        "eventTime": None,
        "firstTimestamp": "2026-12-01T04:00:00Z",
        "lastTimestamp": "2026-12-01T04:00:00Z",
    }


def test_an_event_on_a_synced_pod_is_written_once_on_the_tenant_pod_then_updated() -> None:
    written: list[tuple[dict[str, Any], bool]] = []
    sync = EventSync(lambda event, exists: written.append((event, exists)), _never)
    sync.remember(HOST_POD, PodRef("default", "train-abc12", "tenant-uid-1"))

    sync.sync([host_event("e1", "10")])
    sync.sync([host_event("e1", "10")])
    sync.sync([host_event("e1", "11")])

    assert [exists for _, exists in written] == [False, True]
    event = written[0][0]
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "default",
        "name": "train-abc12",
        "uid": "tenant-uid-1",
    }
    assert event["metadata"]["namespace"] == "default"
    assert event["reason"] == "FailedScheduling" and event["type"] == "Warning"
    assert "eventTime" not in event


def test_events_on_other_objects_or_unknown_pods_stay_on_the_host() -> None:
    written: list[Any] = []
    sync = EventSync(lambda event, exists: written.append(event), _never)
    sync.remember(HOST_POD, PodRef("default", "train-abc12", "tenant-uid-1"))

    sync.sync([host_event("e2", "1", kind="Node"), host_event("e3", "1", name="other-pod")])

    assert written == []


def test_a_preemptor_host_uid_in_the_message_stays_as_vclusters_syncer_leaves_it() -> None:
    written: list[Any] = []
    sync = EventSync(lambda event, exists: written.append(event), _never)
    sync.remember(HOST_POD, PodRef("default", "train-abc12", "tenant-uid-1"))
    sync.remember("embed-x-default-x-team-a", PodRef("default", "embed", "tenant-uid-2"))
    preempted = {**host_event("e4", "1"), "reason": "Preempted"}
    preempted["message"] = "Preempted by pod h-2 on node gpu-1"

    sync.sync([preempted])

    assert written[0]["message"] == "Preempted by pod h-2 on node gpu-1"


def test_a_refused_write_is_tried_again_next_pass_and_holds_up_no_other_event() -> None:
    written: list[str] = []
    refused: list[Exception] = []

    def write(event: Any, exists: bool) -> None:
        if event["metadata"]["name"].endswith("e5") and not refused:
            raise RuntimeError("refused once")
        written.append(event["metadata"]["name"])

    sync = EventSync(write, refused.append)
    sync.remember(HOST_POD, PodRef("default", "train-abc12", "tenant-uid-1"))
    events = [host_event("e5", "1"), host_event("e6", "1")]

    sync.sync(events)
    sync.sync(events)

    assert [str(e) for e in refused] == ["refused once"]
    assert written == ["train-abc12.e6", "train-abc12.e5"]
