"""Watch: the stream the official client's `watch.Watch` consumes, resume, bookmarks, 410."""

from __future__ import annotations

import pytest
from kubernetes import client, watch

from k8s_ai_orchestrator.testing.kube import KubeEmulator

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(60)]


def _cm(name: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"v": "0"})


def test_watch_from_a_list_resource_version_sees_later_changes_in_order(
    core: client.CoreV1Api, ns: str
) -> None:
    listed = core.list_namespaced_config_map(ns)
    core.create_namespaced_config_map(ns, _cm("w1"))
    core.patch_namespaced_config_map("w1", ns, {"data": {"v": "1"}})
    core.delete_namespaced_config_map("w1", ns)
    stream = watch.Watch().stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=listed.metadata.resource_version,
        timeout_seconds=2,
    )
    seen = [(event["type"], event["object"].metadata.name) for event in stream]
    assert seen == [("ADDED", "w1"), ("MODIFIED", "w1"), ("DELETED", "w1")]


def test_watch_without_a_resource_version_starts_with_the_current_objects(
    core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_config_map(ns, _cm("existing"))
    stream = watch.Watch().stream(core.list_namespaced_config_map, ns, timeout_seconds=1)
    names = {event["object"].metadata.name for event in stream if event["type"] == "ADDED"}
    assert "existing" in names


def test_a_watcher_resumes_from_the_last_resource_version_it_saw(
    core: client.CoreV1Api, ns: str
) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, _cm("r1"))
    watcher = watch.Watch()
    first = next(
        iter(
            watcher.stream(
                core.list_namespaced_config_map, ns, resource_version=start, timeout_seconds=2
            )
        )
    )
    watcher.stop()
    core.create_namespaced_config_map(ns, _cm("r2"))
    resumed = watch.Watch().stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=first["object"].metadata.resource_version,
        timeout_seconds=1,
    )
    assert [event["object"].metadata.name for event in resumed] == ["r2"]


def test_label_selected_watch_sees_an_object_leave_the_selection_as_deleted(
    core: client.CoreV1Api, ns: str
) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    body = _cm("sel")
    body.metadata.labels = {"keep": "yes"}
    core.create_namespaced_config_map(ns, body)
    core.patch_namespaced_config_map("sel", ns, {"metadata": {"labels": {"keep": "no"}}})
    stream = watch.Watch().stream(
        core.list_namespaced_config_map,
        ns,
        label_selector="keep=yes",
        resource_version=start,
        timeout_seconds=1,
    )
    assert [event["type"] for event in stream] == ["ADDED", "DELETED"]


def test_bookmarks_carry_the_latest_resource_version(core: client.CoreV1Api, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    response = core.list_namespaced_config_map(
        ns,
        watch=True,
        allow_watch_bookmarks=True,
        resource_version=start,
        timeout_seconds=2,
        _preload_content=False,
    )
    events = [line for line in response.read().decode().splitlines() if line]
    assert any('"type": "BOOKMARK"' in line for line in events)


def test_timeout_seconds_ends_the_watch(core: client.CoreV1Api, ns: str) -> None:
    stream = watch.Watch().stream(
        core.list_namespaced_config_map, ns, resource_version="1000000000", timeout_seconds=1
    )
    assert list(stream) == []


def test_a_too_old_resource_version_gets_an_error_event_with_410(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    old = core.list_namespaced_config_map(ns).metadata.resource_version
    emu.expire_watches("team-a")
    with pytest.raises(client.ApiException) as raised:
        list(
            watch.Watch().stream(
                core.list_namespaced_config_map, ns, resource_version=old, timeout_seconds=2
            )
        )
    assert raised.value.status == 410
    assert "Expired" in raised.value.reason


def test_expire_watches_closes_open_watches_with_410(emu: KubeEmulator, core, ns: str) -> None:
    start = core.list_namespaced_config_map(ns).metadata.resource_version
    response = core.list_namespaced_config_map(
        ns, watch=True, resource_version=start, timeout_seconds=20, _preload_content=False
    )
    emu.expire_watches("team-a")
    lines = [line for line in response.read().decode().splitlines() if line]
    assert '"code": 410' in lines[-1] and '"type": "ERROR"' in lines[-1]
