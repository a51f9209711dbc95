"""Where the behaviour contract runs: an API client, a namespace, how to run Python.

`ContractTarget` is shared by the contract's checks (`contract.py`, `contract_api.py`); its
`request` sends one raw HTTP request, for the answers the client's typed methods hide
(status codes, content types, Tables, metadata-only lists).

Example:
    >>> ContractTarget.__dataclass_fields__["timeout"].default
    120.0
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from k8s_ai_orchestrator.testing.kube.schema import unknown_fields

Predicate = Callable[[], Any]


@dataclass(frozen=True)
class ContractTarget:
    """Where the contract runs."""

    api_client: client.ApiClient
    namespace: str  # an existing namespace the checks may fill and leave dirty
    python: tuple[str, ...] = ("python",)  # argv prefix that runs Python in the container
    image: str = "python:3.12-slim"  # an image that has that Python
    timeout: float = 120.0  # seconds a single wait may take
    # where the pods land, for a node that only takes pods that ask (a real node): its
    # selector and toleration, host directories mounted read-only at the same path (the
    # Python), and the image pull policy (Never: nothing is pulled there)
    node_selector: dict[str, str] | None = None
    tolerations: tuple[dict[str, Any], ...] = ()
    host_mounts: tuple[str, ...] = ()
    image_pull_policy: str | None = None
    # what else the target can say of a wait that timed out (a syncer's state)
    explain: Callable[[], str] | None = None

    def core(self) -> client.CoreV1Api:
        """CoreV1Api on the target."""
        return client.CoreV1Api(self.api_client)

    def batch(self) -> client.BatchV1Api:
        """BatchV1Api on the target."""
        return client.BatchV1Api(self.api_client)

    def wait(self, predicate: Predicate) -> Any:
        """Poll `predicate` until truthy; AssertionError after `timeout` seconds."""
        deadline = time.monotonic() + self.timeout
        while True:
            result = predicate()
            if result:
                return result
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {predicate}\n{self.state()}")
            time.sleep(0.1)

    def state(self) -> str:
        """The namespace's pods (node, phase, conditions) and events, and `explain`'s text."""
        core = self.core()
        lines: list[str] = []
        try:
            pods = core.list_namespaced_pod(self.namespace).items
            events = core.list_namespaced_event(self.namespace).items[-20:]
        except Exception as error:  # noqa: BLE001 - the timeout is the failure to report
            pods, events = [], []
            lines.append(f"(the namespace could not be read: {error})")
        for pod in pods:
            conditions = [(c.type, c.status, c.reason) for c in pod.status.conditions or []]
            lines.append(
                f"pod {pod.metadata.name}: node={pod.spec.node_name} phase={pod.status.phase} "
                f"deleting={pod.metadata.deletion_timestamp is not None} {conditions}"
            )
        for event in events:
            lines.append(f"event {event.involved_object.name}: {event.reason} {event.message}")
        if self.explain is not None:
            lines.append(self.explain())
        return "\n".join(lines)

    def container(self, code: str, memory: str | None = None) -> client.V1Container:
        """A container named main running `python -c code`."""
        limits = {"memory": memory} if memory else None
        mounts = [
            client.V1VolumeMount(name=f"host-{n}", mount_path=path, read_only=True)
            for n, path in enumerate(self.host_mounts)
        ]
        return client.V1Container(
            name="main",
            image=self.image,
            image_pull_policy=self.image_pull_policy,
            command=[*self.python, "-c", code],
            resources=client.V1ResourceRequirements(limits=limits, requests=limits),
            volume_mounts=mounts or None,
        )

    def pod_spec(self, container: client.V1Container) -> client.V1PodSpec:
        """A restartPolicy Never pod spec of `container`, placed where the target says."""
        volumes = [
            client.V1Volume(name=f"host-{n}", host_path=client.V1HostPathVolumeSource(path=path))
            for n, path in enumerate(self.host_mounts)
        ]
        return client.V1PodSpec(
            containers=[container],
            restart_policy="Never",
            node_selector=self.node_selector,
            tolerations=[client.V1Toleration(**t) for t in self.tolerations] or None,
            volumes=volumes or None,
        )

    def pod(self, name: str, code: str, memory: str | None = None) -> client.V1Pod:
        """A restartPolicy Never pod running `python -c code`."""
        spec = self.pod_spec(self.container(code, memory))
        return client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=spec)

    def job(self, name: str, code: str, **spec: Any) -> client.V1Job:
        """A Job whose pods run `python -c code`."""
        pod_spec = self.pod_spec(self.container(code))
        template = client.V1PodTemplateSpec(spec=pod_spec)
        return client.V1Job(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1JobSpec(template=template, **spec),
        )


class _RawResponse:
    def __init__(self, data: Any) -> None:
        self.data = json.dumps(data)


def assert_strict(api_client: client.ApiClient, raw: dict[str, Any], model: str) -> Any:
    """`raw` has no field the client's model lacks and deserializes with validation on."""
    unknown = unknown_fields(raw, model)
    assert not unknown, f"{model}: fields unknown to the client: {unknown}"
    return api_client.deserialize(_RawResponse(raw), model)


@dataclass(frozen=True)
class Answer:
    """One raw HTTP answer: status code, Content-Type and the decoded JSON body."""

    status: int
    content_type: str
    body: Any  # the JSON body, or the text when it is not JSON


def request(
    target: ContractTarget,
    method: str,
    path: str,
    body: Any = None,
    content_type: str = "application/json",
    accept: str = "application/json",
) -> Answer:
    """Send one request with the target's credentials; any status comes back as an Answer."""
    headers = {"Accept": accept, "Content-Type": content_type}
    try:
        response = target.api_client.call_api(
            path,
            method,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
        )
        status, raw_type, data = response.status, response.getheader("Content-Type"), response.data
    except client.ApiException as error:
        status, raw_type, data = error.status, (error.headers or {}).get("Content-Type"), error.body
    text = data.decode() if isinstance(data, bytes) else str(data or "")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = text
    return Answer(int(status), str(raw_type or ""), parsed)


def raw_get(target: ContractTarget, path: str) -> dict[str, Any]:
    """GET `path` as JSON; AssertionError unless 200."""
    answer = request(target, "GET", path)
    assert answer.status == 200, f"GET {path}: {answer.status} {answer.body}"
    return dict(answer.body)


def status_of(call: Callable[[], Any]) -> tuple[int, str]:
    """The (code, message) of the ApiException `call` raises; AssertionError if it succeeds."""
    try:
        call()
    except client.ApiException as error:
        return error.status, json.loads(error.body).get("message", "")
    raise AssertionError("the request was accepted")
