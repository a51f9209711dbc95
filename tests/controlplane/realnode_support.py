"""The real node's fixtures: a node started and stopped around one test, which fails if the
stop leaves a container, a shim or a machine setting behind; a fresh host namespace."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
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
    changed = settled_changes(node, before)
    assert not changed, f"the node changed the machine (before, after): {changed}"
    shutil.rmtree(root, ignore_errors=True)


def settled_changes(
    node: RealNode, before: dict[str, object], settle_s: float = 5.0
) -> dict[str, tuple[object, object]]:
    """What differs from `before`, once the kernel has finished tearing down what the stop
    ended (a cgroup or a mount of a process killed last can outlive it briefly)."""
    deadline = time.monotonic() + settle_s
    while True:
        after = machine_state(node)
        changed = {k: (before[k], after[k]) for k in before if after[k] != before[k]}
        if not changed or time.monotonic() > deadline:
            return changed
        time.sleep(0.2)


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
    assert control_plane.host is not None, "the session plane has no host API server"
    api = config.new_client_from_config(config_file=str(control_plane.host.kubeconfig))
    core = client.CoreV1Api(api)
    name = f"real-node-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield core, name
    finally:
        core.delete_namespace(name)
        api.close()
