"""A tenant of the emulator under `kubectl`, a client nobody here wrote: the everyday commands a
user testing a pipeline reaches for answer as a real cluster would, and the ones that do not
fail with a clear message, each listed in docs/testing-with-the-emulator.md.

kubectl's discovery and HTTP caches go to the test's own directory, not to ~/.kube.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec
from tests.requirements import require_program

CONFIG_MAP = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: demo
data:
  a: "1"
"""


@pytest.fixture(scope="module")
def emulator() -> Iterator[Any]:
    nodes = [NodeSpec(name="node-a", cpu="8", memory="16Gi")]
    with KubeEmulator(nodes=nodes, tenants=["team-a"], tls=True, workdir=None) as emu:
        yield emu


@pytest.fixture
def kubectl(emulator: Any, tmp_path: Path) -> Any:
    """Run `kubectl ARGS...` against tenant team-a: (exit code, stdout + stderr)."""
    binary = require_program(
        "kubectl", "kubectl (any v1.3x client)", "install kubectl (the Kubernetes CLI)"
    )
    env = {**os.environ, "KUBECONFIG": emulator.tenant("team-a").kubeconfig_path}

    def run(*args: str) -> tuple[int, str]:
        argv = [binary, f"--cache-dir={tmp_path / 'kube-cache'}", *args]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        return done.returncode, done.stdout + done.stderr

    return run


def test_everyday_kubectl_commands_answer_as_on_a_real_cluster(
    kubectl: Any, tmp_path: Path
) -> None:
    manifest = tmp_path / "demo.yaml"
    manifest.write_text(CONFIG_MAP)

    assert kubectl("get", "nodes")[1].splitlines()[1].split()[:2] == ["node-a", "Ready"]
    assert kubectl("apply", "--validate=false", "-f", str(manifest)) == (
        0,
        "configmap/demo created\n",
    )
    assert kubectl("patch", "configmap", "demo", "-p", '{"data":{"b":"2"}}')[0] == 0
    assert kubectl("label", "configmap", "demo", "team=a") == (0, "configmap/demo labeled\n")
    code, listed = kubectl("get", "configmap", "-l", "team=a", "-o", "name")
    assert (code, listed) == (0, "configmap/demo\n")
    code, data = kubectl("get", "configmap", "demo", "-o", "jsonpath={.data}")
    assert (code, data) == (0, '{"a":"1","b":"2"}')
    assert kubectl("annotate", "configmap", "demo", "note=x")[0] == 0
    assert kubectl("delete", "configmap", "demo") == (0, 'configmap "demo" deleted\n')
    code, gone = kubectl("get", "configmap", "demo")
    assert code == 1 and 'configmaps "demo" not found' in gone
    assert kubectl("run", "p1", "--image=busybox", "--restart=Never", "--", "true") == (
        0,
        "pod/p1 created\n",
    )
    assert "node-a" in kubectl("describe", "node", "node-a")[1]


def test_what_the_emulator_cannot_read_is_refused_with_the_servers_own_words(
    kubectl: Any, tmp_path: Path
) -> None:
    """kubectl sends built-in kinds as protobuf (`create configmap`, `create job`, `auth
    can-i`): 415 UnsupportedMediaType, naming the formats the emulator reads. `apply` with
    validation and `explain` need the OpenAPI documents, which the emulator does not serve."""
    code, said = kubectl("create", "configmap", "c1", "--from-literal=x=1")
    assert code == 1
    assert "the body of the request was in an unknown format" in said
    assert "application/json" in said
    code, said = kubectl("auth", "can-i", "create", "jobs")
    assert code == 1 and "UnsupportedMediaType" in said
    manifest = tmp_path / "demo.yaml"
    manifest.write_text(CONFIG_MAP)
    code, said = kubectl("apply", "-f", str(manifest))
    assert code == 1 and "failed to download openapi" in said and "--validate=false" in said
