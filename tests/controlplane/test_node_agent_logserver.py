"""The node agent's log server answers as a kubelet's `/containerLogs` does, without a plane.

A pod the node does not have (not yet synced to it, or gone) is a `404`; a container of a pod
it has but cannot serve a log of (waiting to start) is a `400`. The API server passes either
on to the client as that status, and the executor's log reader tells them apart: a `404`
before the pod was seen to end means "not there yet", not "gone".
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from k8s_ai_orchestrator.testing.controlplane import pki
from k8s_ai_orchestrator.testing.controlplane.agent.logserver import LogServer, NotOnNode


def lookup(
    namespace: str, name: str, container: str, previous: bool
) -> tuple[Path, Callable[[], bool]] | str:
    if name == "absent":
        return NotOnNode(f'pod "{name}" does not exist')
    return f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'


def status_of(server: LogServer, ca: pki.KeyPair, pod: str) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(ca.cert))
    url = f"https://127.0.0.1:{server.port}/containerLogs/default/{pod}/main"
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(url, context=context, timeout=10)
    return error.value.code, error.value.read().decode()


def test_a_pod_the_node_does_not_have_is_404_and_a_waiting_container_400(tmp_path: Path) -> None:
    ca = pki.write_ca(tmp_path)
    serving = pki.write_serving_cert(ca, tmp_path, ["127.0.0.1"])
    server = LogServer(lookup, serving).start()
    try:
        assert status_of(server, ca, "absent") == (404, 'pod "absent" does not exist')
        code, text = status_of(server, ca, "hello")
        assert code == 400 and "waiting to start" in text
    finally:
        server.stop()
