"""A real Kubernetes v1.37.2 control plane (host + tenants team-a, team-b) for the whole session.

Imported by tests/conftest.py, so every test folder can ask for `control_plane`, `host` or `tenant`.

Outside CI the tests skip when `kubeplane` is not built yet (building takes ~20 min cold). With
CI=true a missing Go or a failed build fails them, and the fixture builds the binary itself if
it is not cached. KUBEPLANE_BIN_DIR points at a prebuilt binary directory instead. Kueue
(`kueue_team_a`, scripts/build-kueue.sh) follows the same rules, with KUEUE_BIN_DIR, and so do
Karpenter (`karpenter_bin_dir`, scripts/build-karpenter.sh), with KARPENTER_BIN_DIR, the real
node's programs (`node_bin_dir`, scripts/build-node.sh), with K8S_AI_NODE_BIN_DIR, and the real
vCluster syncer (`vcluster_bin_dir`, scripts/build-vcluster.sh), with K8S_AI_VCLUSTER_BIN_DIR.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config

from k8s_ai_orchestrator.testing.controlplane import (
    ApiServer,
    ControlPlane,
    KubeplaneUnavailable,
    build_kubeplane,
    start_control_plane,
)
from k8s_ai_orchestrator.testing.controlplane.agent import NodeSpec
from k8s_ai_orchestrator.testing.controlplane.binary import (
    KarpenterUnavailable,
    KueueUnavailable,
    NodeProgramsUnavailable,
    VClusterUnavailable,
    build_karpenter,
    build_kueue,
    build_node,
    build_vcluster,
)
from k8s_ai_orchestrator.testing.controlplane.flags import Gates
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.controlplane.kueue import KueueProcess, start_kueue
from k8s_ai_orchestrator.testing.controlplane.vclustersyncer import VClusterSyncer
from tests.kubernetes.k8s_support import install_priority_classes
from tests.requirements import REAL_PLANE_PARAM, VCLUSTER_PARAM, in_ci, require

BUILD_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "build-kubeplane.sh"
VCLUSTER_VALUES = Path(__file__).resolve().parents[1] / "helm" / "vcluster-values.yaml"
KUEUE_BUILD_SCRIPT = BUILD_SCRIPT.with_name("build-kueue.sh")
KARPENTER_BUILD_SCRIPT = BUILD_SCRIPT.with_name("build-karpenter.sh")
NODE_BUILD_SCRIPT = BUILD_SCRIPT.with_name("build-node.sh")
VCLUSTER_BUILD_SCRIPT = BUILD_SCRIPT.with_name("build-vcluster.sh")
TENANTS = ("team-a", "team-b")
EMULATOR_PARAM = "emulator"
TENANT = TENANTS[0]
# The parameters of the fixtures that run a test on the emulator or on this real plane, each
# with its marker (tests/requirements.py checks that the real plane's is there).
KUBE_TARGETS = [
    pytest.param(EMULATOR_PARAM, marks=pytest.mark.emulator),
    pytest.param(REAL_PLANE_PARAM, marks=pytest.mark.controlplane),
]
# The same, plus the real plane whose tenant team-a the real vCluster syncer serves: for the
# tests that concern a tenant (routing, Pending, OOM, preemption, resize, logs, cancel).
TENANT_TARGETS = [
    *KUBE_TARGETS,
    pytest.param(VCLUSTER_PARAM, marks=[pytest.mark.controlplane, pytest.mark.vcluster]),
]
STARTED: list[str] = []  # the version each real control plane of this session reported


def deselect_emulator_twins(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out the emulator runs of tests whose real-plane run (same test, same other
    parameters) is also selected, under CI=true only: there the real plane cannot be missing,
    so `make test` runs such a scenario on the real thing alone. The emulator stays held to the
    real plane by the contract (tests/contract); `make test-fast`, which leaves the real plane
    out, and runs outside CI, where the real plane may skip, still run the emulator's."""
    twins = set(map(id, _emulator_twins(items))) if in_ci() else set()
    if twins:
        config.hook.pytest_deselected(items=[item for item in items if id(item) in twins])
        items[:] = [item for item in items if id(item) not in twins]


def _emulator_twins(items: list[pytest.Item]) -> list[pytest.Item]:
    real = {key for item in items if (key := _twin_key(item, REAL_PLANE_PARAM))}
    return [item for item in items if _twin_key(item, EMULATOR_PARAM) in real]


def _twin_key(item: pytest.Item, plane: str) -> tuple[str, str] | None:
    """The test and its parameters other than the plane, when one parameter is `plane`."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    names = [name for name, value in params.items() if isinstance(value, str) and value == plane]
    if len(names) != 1:
        return None
    others = sorted((name, repr(value)) for name, value in params.items() if name != names[0])
    return item.nodeid.partition("[")[0], f"{names[0]}: {others}"


def _built(env: str, build: Callable[..., Path], script: Path, what: str) -> Path:
    """A build directory: `$env` when set, else the build script's (it builds only under CI);
    without one the test skips, or fails under CI (tests/requirements.py)."""
    if os.environ.get(env):
        return Path(os.environ[env])
    try:
        return build(script, check_only=not in_ci())
    except (
        KubeplaneUnavailable,
        KueueUnavailable,
        KarpenterUnavailable,
        NodeProgramsUnavailable,
        VClusterUnavailable,
    ) as error:
        require(what, False, str(error))
        raise


@pytest.fixture(scope="session")
def kubeplane_bin_dir() -> Path:
    """The directory of the kubeplane binary; built here only under CI."""
    return _built("KUBEPLANE_BIN_DIR", build_kubeplane, BUILD_SCRIPT, "the real control plane")


@pytest.fixture(scope="session")
def control_plane(kubeplane_bin_dir: Path) -> Iterator[ControlPlane]:
    # Not under pytest's basetemp: concurrent pytest sessions rotate it away under a live plane.
    run_dir = Path(tempfile.mkdtemp(prefix="k8sai-controlplane-"))
    with start_control_plane(kubeplane_bin_dir, run_dir, tenants=list(TENANTS)) as plane:
        record_version(plane)
        yield plane
    shutil.rmtree(run_dir, ignore_errors=True)  # kept (logs) when startup failed


@pytest.fixture
def host(control_plane: ControlPlane) -> ApiServer:
    """The host apiserver of the session control plane."""
    assert control_plane.host is not None
    return control_plane.host


@pytest.fixture
def tenant(control_plane: ControlPlane) -> ApiServer:
    """The apiserver of the session's first tenant."""
    return control_plane.tenants[TENANT]


# The host's nodes on the real plane: what the Kubernetes suites need between them (an xl step
# fits big-1 only; GPU steps need gpu-1's taint toleration).
PLANE_NODES = (
    NodeSpec(name="big-1", cpu="96", memory="768Gi"),
    NodeSpec(
        name="gpu-1",
        cpu="32",
        memory="256Gi",
        gpus=4,
        taints=({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},),
    ),
)


# The tenant chart's PriorityClasses (helm/k8s-ai-tenant), plus one above them.
@pytest.fixture(scope="session")
def plane_with_nodes(control_plane: ControlPlane) -> Iterator[RealKube]:
    """The session control plane with the node agent, tenant syncers and PriorityClasses."""
    work = Path(tempfile.mkdtemp(prefix="k8sai-nodes-"))
    with RealKube(control_plane, PLANE_NODES, work) as kube:
        _prepare_tenants(kube, len(PLANE_NODES))
        yield kube
    shutil.rmtree(work, ignore_errors=True)


def _prepare_tenants(kube: RealKube, nodes: int) -> None:
    """The tenant PriorityClasses, then wait until every tenant lists the host's nodes."""
    for tenant_name in TENANTS:
        install_priority_classes(kube.tenant(tenant_name).api_client())
    for tenant_name in TENANTS:
        core = client.CoreV1Api(kube.tenant(tenant_name).api_client())
        kube.wait_for(lambda c=core: len(c.list_node().items) == nodes, 60)


GANG_NODES = [NodeSpec(name=f"node-{n}", cpu="8", memory="16Gi", gpus=4) for n in "ab"]


@pytest.fixture(scope="session")
def gang_plane(kubeplane_bin_dir: Path) -> Iterator[RealKube]:
    """A second real control plane for the gang tests, with the emulator gang target's nodes:
    two untainted nodes of 8 CPUs, 16Gi and 4 GPUs each (the session plane's nodes are shaped
    for the single-node tests), and the gang-scheduling API (`GenericWorkload`, PodGroups in
    scheduling.k8s.io/v1beta1) on every component."""
    run_dir = Path(tempfile.mkdtemp(prefix="k8sai-gangplane-"))
    gates = Gates({"GenericWorkload": True}, ["scheduling.k8s.io/v1beta1=true"])
    with start_control_plane(
        kubeplane_bin_dir, run_dir, tenants=list(TENANTS), gates=gates
    ) as plane:
        record_version(plane)
        with RealKube(plane, GANG_NODES, run_dir / "nodes") as kube:
            _prepare_tenants(kube, len(GANG_NODES))
            yield kube
    shutil.rmtree(run_dir, ignore_errors=True)


def _recommended_sync() -> dict[str, object]:
    """The `sync` part of our recommended vCluster values (PriorityClasses to the host, every
    host node to the tenant), which the real syncer gets as a user's install would. (Their
    quota and limit range stay off: the plane's tests size their own pods.)"""
    values = yaml.safe_load(VCLUSTER_VALUES.read_text())
    return {"sync": values["sync"]}


@pytest.fixture(scope="session")
def vcluster_plane(kubeplane_bin_dir: Path, vcluster_bin_dir: Path) -> Iterator[RealKube]:
    """A third real control plane, shaped as the session plane (`PLANE_NODES`, tenants team-a
    and team-b, the chart's PriorityClasses), whose tenant team-a is synced by the real vCluster
    v0.34 syncer (`VClusterSyncer`, with the `sync` part of our recommended values; its kubelet
    traffic through the plane's egress tunnel) and reached, as a real vCluster's users reach it,
    through the syncer's front proxy; team-b is synced by ours. One real syncer per machine: a
    second test run waits for nothing, it fails at once (the syncer's plugin port lock)."""
    run_dir = Path(tempfile.mkdtemp(prefix="k8sai-vcplane-"))
    with (
        start_control_plane(
            kubeplane_bin_dir, run_dir, tenants=list(TENANTS), kubelet_egress=[TENANT]
        ) as plane,
        RealKube(
            plane, PLANE_NODES, run_dir / "nodes", synced_elsewhere=frozenset({TENANT})
        ) as kube,
        VClusterSyncer(
            vcluster_bin_dir, plane, TENANT, run_dir / "vcluster", overrides=_recommended_sync()
        ) as vcluster,
    ):
        assert vcluster.front is not None
        kube.fronts[TENANT] = vcluster.front  # team-a's users reach it through the syncer
        record_version(plane)
        _prepare_tenants(kube, len(PLANE_NODES))
        yield kube
    shutil.rmtree(run_dir, ignore_errors=True)  # kept (logs) when startup failed


@pytest.fixture(scope="session")
def kueue_bin_dir() -> Path:
    """The directory of the Kueue build; built here only under CI."""
    return _built("KUEUE_BIN_DIR", build_kueue, KUEUE_BUILD_SCRIPT, "Kueue")


@pytest.fixture(scope="session")
def karpenter_bin_dir() -> Path:
    """The directory of the Karpenter build (core and kwok provider); built here only under
    CI."""
    return _built("KARPENTER_BIN_DIR", build_karpenter, KARPENTER_BUILD_SCRIPT, "Karpenter")


@pytest.fixture(scope="session")
def node_bin_dir() -> Path:
    """The directory of the real node's programs (containerd, CNI plugins, pause); built here
    only under CI. K8S_AI_NODE_BIN_DIR points at a prebuilt one instead."""
    return _built("K8S_AI_NODE_BIN_DIR", build_node, NODE_BUILD_SCRIPT, "the real node's programs")


@pytest.fixture(scope="session")
def vcluster_bin_dir() -> Path:
    """The directory of the real vCluster syncer (`vcluster`, its chart's `values.yaml`); built
    here only under CI. K8S_AI_VCLUSTER_BIN_DIR points at a prebuilt one instead."""
    return _built(
        "K8S_AI_VCLUSTER_BIN_DIR", build_vcluster, VCLUSTER_BUILD_SCRIPT, "the real vCluster syncer"
    )


@dataclass(frozen=True)
class KueueQueues:
    """Kueue on a tenant, with one ClusterQueue and the LocalQueue that Jobs name in their
    `kueue.x-k8s.io/queue-name` label."""

    kueue: KueueProcess
    tenant: str
    namespace: str  # where the LocalQueue is
    local_queue: str
    cluster_queue: str


KUEUE_NAMESPACE = "default"  # the gang tests' namespace (tests/kubernetes/k8s_support.py)
CHART = Path(__file__).resolve().parents[1] / "helm" / "k8s-ai-tenant"
# The chart's Kueue objects only (PriorityClasses exist; no quota or limits on this tenant),
# with both gang nodes (2 x 8 CPUs, 16Gi, 4 GPUs) as the ClusterQueue's quota.
KUEUE_CHART_VALUES = {
    "tenant": TENANT,
    "namespace": {"create": False, "name": KUEUE_NAMESPACE},
    "priorityClasses": {"create": False},
    "quota": {"enabled": False},
    "limitRange": {"enabled": False},
    "kueue": {
        "enabled": True,
        "resourceFlavor": {"name": "default"},
        "quota": {"cpu": "16", "memory": "32Gi", "nvidia.com/gpu": "8"},
    },
}


@pytest.fixture(scope="session")
def kueue_team_a(kueue_bin_dir: Path, gang_plane: RealKube) -> Iterator[KueueQueues]:
    """Kueue on `gang_plane`'s tenant team-a, with the tenant chart's `kueue.enabled` objects:
    flavor `default`, ClusterQueue `team-a` with the gang nodes' capacity as quota, LocalQueue
    `k8s-ai` in the gang tests' namespace. Only Jobs labelled `kueue.x-k8s.io/queue-name`
    reach Kueue."""
    import helm_python as helm  # helm-python-sdk, a dev dependency

    run_dir = Path(tempfile.mkdtemp(prefix="k8sai-kueue-"))
    with start_kueue(kueue_bin_dir, gang_plane.plane.tenants[TENANT], run_dir) as kueue:
        # The tenant chart makes the ClusterQueue, flavor and LocalQueue, as in production.
        kubeconfig = str(gang_plane.tenant(TENANT).kubeconfig_path)
        tenant_helm = helm.Config(kubeconfig_path=kubeconfig, namespace=KUEUE_NAMESPACE)
        tenant_helm.install(CHART, "k8s-ai-kueue", KUEUE_CHART_VALUES, timeout=120)
        yield KueueQueues(kueue, TENANT, KUEUE_NAMESPACE, "k8s-ai", TENANT)
    shutil.rmtree(run_dir, ignore_errors=True)  # kept (the log) when the start failed


@pytest.fixture
def real_kube(plane_with_nodes: RealKube) -> RealKube:
    """The real plane with nodes, showing only what the test creates."""
    return plane_with_nodes.fresh()


def record_version(plane: ControlPlane) -> None:
    """Note the version the started plane's kube-apiserver reports, for `summary_line`."""
    assert plane.host is not None
    with config.new_client_from_config(config_file=str(plane.host.kubeconfig)) as api:
        STARTED.append(client.VersionApi(api).get_code().git_version)


def summary_line() -> str:
    """What the test output says about the Kubernetes API the suites ran against."""
    if not STARTED:
        return "Kubernetes: the in-repo emulator only (the real control plane was not started)"
    return (
        f"Kubernetes: the emulator and a real control plane, kube-apiserver {STARTED[0]} "
        f"(host + tenants {', '.join(TENANTS)}; nodes from the node agent)"
    )
