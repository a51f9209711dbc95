"""Every object the emulator returns deserializes strictly into the official client's models."""

from __future__ import annotations

import json
from typing import Any

import pytest
from emu_support import python_job, python_pod
from kubernetes import client

from k8s_ai_orchestrator.testing.kube import KubeEmulator
from tests.contract_support.contract import assert_strict

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(90)]


def raw_get(api: client.ApiClient, path: str) -> Any:
    response = api.call_api(path, "GET", auth_settings=["BearerToken"], _preload_content=False)
    return json.loads(response.data)


@pytest.fixture(scope="module")
def populated(emu: KubeEmulator, core: client.CoreV1Api, batch: client.BatchV1Api) -> str:
    """A namespace holding one of everything, in finished, failed and pending states."""
    ns = "models"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=ns)))
    core.create_namespaced_pod(ns, python_pod("done", "print('x')"))
    core.create_namespaced_pod(ns, python_pod("pending", "pass", cpu="1000"))
    core.create_namespaced_pod(ns, python_pod("pull", "pass", image="invalid/nothing"))
    batch.create_namespaced_job(ns, python_job("ok", "pass"))
    batch.create_namespaced_job(ns, python_job("bad", "raise SystemExit(1)", backoff_limit=0))
    core.create_namespaced_secret(
        ns, client.V1Secret(metadata=client.V1ObjectMeta(name="s"), string_data={"k": "v"})
    )
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="q"), spec=client.V1ResourceQuotaSpec(hard={"pods": "50"})
    )
    core.create_namespaced_resource_quota(ns, quota)
    limits = client.V1LimitRange(
        metadata=client.V1ObjectMeta(name="l"),
        spec=client.V1LimitRangeSpec(
            limits=[client.V1LimitRangeItem(type="Container", default={"memory": "1Gi"})]
        ),
    )
    core.create_namespaced_limit_range(ns, limits)

    def settled() -> bool:
        jobs = {j["metadata"]["name"]: j for j in emu.jobs("team-a", ns)}
        finished = all(
            any(c["type"] in ("Complete", "Failed") for c in j["status"].get("conditions", []))
            for j in jobs.values()
        )
        done = core.read_namespaced_pod("done", ns).status.phase == "Succeeded"
        return len(jobs) == 2 and finished and done

    emu.wait_for(settled)
    return ns


PATHS = [
    ("/api/v1/namespaces/models/pods/done", "V1Pod"),
    ("/api/v1/namespaces/models/pods/pending", "V1Pod"),
    ("/api/v1/namespaces/models/pods/pull", "V1Pod"),
    ("/api/v1/namespaces/models/pods", "V1PodList"),
    ("/apis/batch/v1/namespaces/models/jobs/ok", "V1Job"),
    ("/apis/batch/v1/namespaces/models/jobs/bad/status", "V1Job"),
    ("/apis/batch/v1/namespaces/models/jobs", "V1JobList"),
    ("/api/v1/namespaces/models/events", "CoreV1EventList"),
    ("/api/v1/namespaces/models/secrets/s", "V1Secret"),
    ("/api/v1/namespaces/models/resourcequotas/q", "V1ResourceQuota"),
    ("/api/v1/namespaces/models/limitranges", "V1LimitRangeList"),
    ("/api/v1/namespaces/models/serviceaccounts", "V1ServiceAccountList"),
    ("/api/v1/namespaces/models/configmaps", "V1ConfigMapList"),
    ("/api/v1/namespaces/models", "V1Namespace"),
    ("/api/v1/namespaces", "V1NamespaceList"),
    ("/apis/scheduling.k8s.io/v1/priorityclasses", "V1PriorityClassList"),
    ("/api/v1/namespaces/models/pods/absent", "V1Status"),
    ("/api", "V1APIVersions"),
    ("/apis", "V1APIGroupList"),
    ("/api/v1", "V1APIResourceList"),
    ("/apis/batch/v1", "V1APIResourceList"),
    ("/version", "VersionInfo"),
]


@pytest.mark.parametrize(("path", "model"), PATHS, ids=[p for p, _ in PATHS])
def test_responses_deserialize_without_unknown_or_missing_fields(
    emu: KubeEmulator, api: client.ApiClient, populated: str, path: str, model: str
) -> None:
    try:
        raw = raw_get(api, path)
    except client.ApiException as error:
        raw = json.loads(error.body)
    assert_strict(api, raw, model)


def test_nodes_deserialize_on_the_host(emu: KubeEmulator) -> None:
    host = emu.host.api_client()
    assert_strict(host, raw_get(host, "/api/v1/nodes"), "V1NodeList")


def test_watch_events_carry_strict_objects(api: client.ApiClient, populated: str) -> None:
    response = api.call_api(
        "/api/v1/namespaces/models/pods",
        "GET",
        auth_settings=["BearerToken"],
        query_params=[("watch", "true"), ("timeoutSeconds", "1")],
        _preload_content=False,
    )
    events = [json.loads(line) for line in response.data.decode().splitlines() if line]
    assert events
    for event in events:
        assert_strict(api, event, "V1WatchEvent")
        assert_strict(api, event["object"], "V1Pod")
