"""The real node's fixtures: a node started and stopped around one test, which fails if the
stop leaves a container, a shim or a machine setting behind; a fresh host namespace."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from k8s_ai_orchestrator.testing.controlplane import ControlPlane, nodecleanup
from k8s_ai_orchestrator.testing.controlplane.realnode import RealNode
from tests.requirements import INSTALL_DEPS, require, require_program


@pytest.fixture
def real_node(
    control_plane: ControlPlane, node_bin_dir: Path, tmp_path: Path
) -> Iterator[RealNode]:
    """A real node on the session plane, stopped after the test; the test fails if the stop
    leaves a container, a shim or a machine setting behind. Its logs are kept in tmp_path."""
    require(
        "root (the real node mounts, makes cgroups and namespaces)",
        os.geteuid() == 0,
        "run the tests as root",
    )
    require_program("runc", "Debian runc", INSTALL_DEPS)
    require_program("nsenter", "util-linux nsenter", INSTALL_DEPS)
    root = Path(tempfile.mkdtemp(prefix="k8sai-rn-"))
    node = RealNode(control_plane, node_bin_dir, root)
    before = machine_state(node)
    try:
        yield node.start()
    finally:
        problems = node.stop()
        left = node.leftovers()
        shutil.copytree(root / "logs", tmp_path / "node-logs", dirs_exist_ok=True)
    assert problems == [], problems
    assert left == [], f"still running after the node stopped: {left}"
    assert machine_state(node) == before
    shutil.rmtree(root, ignore_errors=True)


def machine_state(node: RealNode) -> dict[str, object]:
    """What a node may change on the machine: sysctls, network namespaces, mounts under its
    directory, cgroups, directories outside its own."""
    return {
        "sysctls": nodecleanup.read_sysctls(),
        "netns": sorted(p.name for p in Path("/run/netns").glob("*")),
        "mounts": nodecleanup.mounts_under(node.layout.root),
        "cgroups": sorted(str(p) for p in Path("/sys/fs/cgroup").glob(f"*{node.cgroup_root}")),
        "dirs": [d.exists() for d in nodecleanup.FIXED_DIRS],
    }


@pytest.fixture
def real_node_root(tmp_path: Path) -> Iterator[Path]:
    """A short directory for nodes that a test starts itself (it holds unix sockets)."""
    root = Path(tempfile.mkdtemp(prefix="k8sai-rn-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[tuple[client.CoreV1Api, str]]:
    """A fresh namespace on the host, deleted after the test."""
    assert control_plane.host is not None
    api = config.new_client_from_config(config_file=str(control_plane.host.kubeconfig))
    core = client.CoreV1Api(api)
    name = f"real-node-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield core, name
    finally:
        core.delete_namespace(name)
        api.close()
