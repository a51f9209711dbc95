"""Karpenter (sigs.k8s.io/karpenter v1.14, its kwok cloud provider, built by
`scripts/build-karpenter.sh`) as a plain process against the host apiserver of the test control
plane, so tests see a real autoscaler create NodeClaims and Nodes for pending pods.

What the in-cluster install provides, this module does itself: the release's CRDs
(`karpenter.sh` NodePools, NodeClaims, NodeOverlays, `autoscaling.x-k8s.io` CapacityBuffers and
`karpenter.kwok.sh` KWOKNodeClasses), one KWOKNodeClass `default`, the NodePools, and the
process's environment (no leader election, free metrics and health ports, the admin kubeconfig).
No webhook is involved: v1 has none.

The kwok provider launches no machine: for each NodeClaim it creates a Node object itself
(taint `karpenter.sh/unregistered`, phase Pending, no conditions, `spec.providerID`
`kwok://<name>`). Nothing makes such a Node Ready unless a kubelet stand-in adopts it, so its
NodeClaim stays `Initialized=Unknown` (`NodeNotReady`), and Karpenter never consolidates a
NodeClaim that is not initialized.

Its instance types come from a catalog file of our own (`KwokShape`, `catalog_json`): the
provider's built-in catalog holds only CPU, memory, pods and ephemeral storage (no GPUs).

Example:
    >>> [pool.name for pool in DEFAULT_POOLS]
    ['cpu', 'highmem', 'gpu']
    >>> node_pool(DEFAULT_POOLS[2])["spec"]["limits"]
    {'nvidia.com/gpu': '16'}
    >>> with start_karpenter(bin_dir, plane.host, run_dir) as karpenter:  # doctest: +SKIP
    ...     print(karpenter.ready_after_s)
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from kubernetes import client, config

from .cluster import ApiServer
from .kueue import _create, _create_or_replace, _delete, _not_established
from .process import Component, ControlPlaneError, HttpsTarget, Probe, free_port

Obj = dict[str, Any]

GROUP = "karpenter.sh"
VERSION = "v1"
NODE_CLASS_GROUP = "karpenter.kwok.sh"
NODE_CLASS_VERSION = "v1alpha1"
NODE_CLASS_KIND = "KWOKNodeClass"
NODE_CLASS = "default"
NODEPOOL_LABEL = "karpenter.sh/nodepool"  # on every NodeClaim and Node Karpenter launches
PROVIDER_PREFIX = "kwok://"  # the providerID of the Nodes the kwok provider creates
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
GPU = "nvidia.com/gpu"
ZONE = "zone-a"
LOOPBACK = "127.0.0.1"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}  # as the plane's GPU node
# On every node of the default pools: a pod that selects it never lands on the node agent's
# fixed nodes of the same plane.
AUTOSCALED_LABEL = "k8s-ai-orchestrator/autoscaled"
AUTOSCALED = {AUTOSCALED_LABEL: "true"}


@dataclass(frozen=True)
class KwokShape:
    """One instance type of the kwok provider's catalog.

    Example:
        >>> KwokShape("gpu-8", cpu=64, memory="512Gi", gpus=8).resources()["nvidia.com/gpu"]
        '8'
    """

    name: str  # the Node's `node.kubernetes.io/instance-type`
    cpu: int
    memory: str  # a Kubernetes quantity
    gpus: int = 0  # `nvidia.com/gpu` in the Node's allocatable
    price: float = 1.0  # per hour, on demand; Karpenter launches the cheapest shape that fits
    pods: int = 110

    def resources(self) -> dict[str, str]:
        """The shape's capacity as the catalog file states it."""
        resources = {"cpu": str(self.cpu), "memory": self.memory, "pods": str(self.pods)}
        if self.gpus:
            resources[GPU] = str(self.gpus)
        return resources


# Shaped like the plane's fixed nodes (tests/plane_fixtures.py): the high-memory shape holds an
# `xl` step (72 CPU / 450Gi), the big GPU shape a `gpu-8` step.
CATALOG = (
    KwokShape("cpu-8", cpu=8, memory="32Gi", price=0.4),
    KwokShape("cpu-16", cpu=16, memory="64Gi", price=0.8),
    KwokShape("cpu-32", cpu=32, memory="128Gi", price=1.6),
    KwokShape("mem-96", cpu=96, memory="768Gi", price=6.0),
    KwokShape("gpu-1", cpu=8, memory="64Gi", gpus=1, price=3.0),
    KwokShape("gpu-8", cpu=64, memory="512Gi", gpus=8, price=24.0),
)


def catalog_json(shapes: Iterable[KwokShape]) -> str:
    """The catalog file the kwok provider reads (`INSTANCE_TYPES_FILE_PATH`): every shape
    linux/amd64, offered on demand in one zone.

    Example:
        >>> json.loads(catalog_json(CATALOG[:1]))[0]["resources"]["cpu"]
        '8'
    """
    offering_requirements = [
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": [ZONE]},
    ]
    entries = [
        {
            "name": shape.name,
            "offerings": [
                {"Price": shape.price, "Available": True, "Requirements": offering_requirements}
            ],
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": shape.resources(),
        }
        for shape in shapes
    ]
    return json.dumps(entries, indent=1)


@dataclass(frozen=True)
class PoolSpec:
    """A NodePool: which catalog shapes it may launch, its limits, and how fast it empties."""

    name: str
    shapes: tuple[str, ...]  # instance-type names from the catalog
    limits: Mapping[str, str]  # the pool's total, e.g. {"cpu": "64"}; Karpenter stops there
    taints: tuple[Mapping[str, str], ...] = ()
    consolidate_after: str = "5s"  # an empty node goes this long after its last pod
    # Karpenter tries pools by weight, highest first (with equal weights it took `highmem`
    # before `cpu` for a 4 CPU pod on this plane)
    weight: int | None = None  # 1 to 100; None: Karpenter's 0
    labels: Mapping[str, str] = field(default_factory=dict)  # on every node of the pool


DEFAULT_POOLS = (
    PoolSpec("cpu", ("cpu-8", "cpu-16", "cpu-32"), {"cpu": "64"}, weight=30, labels=AUTOSCALED),
    PoolSpec(
        "highmem", ("mem-96",), {"cpu": "192", "memory": "1536Gi"}, weight=20, labels=AUTOSCALED
    ),
    PoolSpec(
        "gpu", ("gpu-1", "gpu-8"), {GPU: "16"}, taints=(GPU_TAINT,), weight=10, labels=AUTOSCALED
    ),
)


def node_pool(pool: PoolSpec) -> Obj:
    """The NodePool manifest: the pool's shapes on the kwok node class, its limits and weight,
    empty nodes removed `consolidate_after` after their last pod, never expired.

    Example:
        >>> node_pool(DEFAULT_POOLS[0])["spec"]["disruption"]["consolidationPolicy"]
        'WhenEmpty'
    """
    requirement = {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": list(pool.shapes)}
    template_spec: Obj = {
        "nodeClassRef": {"group": NODE_CLASS_GROUP, "kind": NODE_CLASS_KIND, "name": NODE_CLASS},
        "requirements": [requirement],
        "expireAfter": "Never",
    }
    if pool.taints:
        template_spec["taints"] = [dict(t) for t in pool.taints]
    weight = {} if pool.weight is None else {"weight": pool.weight}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodePool",
        "metadata": {"name": pool.name},
        "spec": {
            **weight,
            "template": {"metadata": {"labels": dict(pool.labels)}, "spec": template_spec},
            "limits": dict(pool.limits),
            "disruption": {
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": pool.consolidate_after,
                "budgets": [{"nodes": "100%"}],
            },
        },
    }


@dataclass(frozen=True)
class KarpenterPorts:
    """Karpenter's ports (it binds them on every interface; probed on loopback)."""

    health: int  # HTTP, /healthz and /readyz
    metrics: int  # HTTP, /metrics


class KarpenterProcess:
    """Karpenter running against one apiserver; see the module docstring.

    Args:
        bin_dir: the build directory (`build_karpenter`): `karpenter` and `crds/`.
        api: the apiserver whose nodes Karpenter provisions, through its admin kubeconfig.
        run_dir: the catalog file and `karpenter.log` go here (created if needed).
        node_pools: the NodePools created at start and deleted, with their nodes, at stop.
        catalog: the kwok provider's instance types.
        startup_timeout_s: for each stage of the start (CRDs, ready).
        cleanup_timeout_s: how long stop waits for Karpenter to remove its nodes.
        clock, sleep: injected so tests can drive time.
    """

    def __init__(
        self,
        bin_dir: Path,
        api: ApiServer,
        run_dir: Path,
        *,
        node_pools: Sequence[PoolSpec] = DEFAULT_POOLS,
        catalog: Sequence[KwokShape] = CATALOG,
        startup_timeout_s: float = 120.0,
        cleanup_timeout_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.bin_dir = Path(bin_dir)
        self.api = api
        self.run_dir = Path(run_dir)
        self.node_pools = tuple(node_pools)
        self.catalog = tuple(catalog)
        self.startup_timeout_s = startup_timeout_s
        self.cleanup_timeout_s = cleanup_timeout_s
        self.ports = KarpenterPorts(health=free_port(), metrics=free_port())
        self.log_path = self.run_dir / "karpenter.log"
        self.component: Component | None = None
        self._clock = clock
        self._sleep = sleep

    def api_client(self) -> client.ApiClient:
        """A new admin client of the apiserver Karpenter manages."""
        return config.new_client_from_config(config_file=str(self.api.kubeconfig))

    @property
    def ready_after_s(self) -> dict[str, float]:
        """Seconds from the process start to each readiness stage."""
        return dict(self.component.ready_after_s) if self.component else {}

    def start(self) -> KarpenterProcess:
        """Install the CRDs, the node class and the NodePools, start Karpenter and wait until
        it is ready.

        Raises:
            ControlPlaneError: a stage timed out or Karpenter exited; the message holds the
                log tail. Whatever was started is stopped first.
        """
        if self.component is not None:
            return self
        if not (self.bin_dir / "karpenter").is_file():
            raise ControlPlaneError(
                f"no karpenter binary in {self.bin_dir}; build it with scripts/build-karpenter.sh"
            )
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            with self.api_client() as api:
                self._install(api)
                self.component = Component(
                    "karpenter",
                    [str(self.bin_dir / "karpenter")],
                    self.log_path,
                    env=self._environment(),
                    clock=self._clock,
                    sleep=self._sleep,
                ).start()
                health = HttpsTarget(f"http://{LOOPBACK}:{self.ports.health}")
                self.component.wait_ready(health.probe("/readyz"), self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Delete the NodePools and wait until Karpenter has removed their NodeClaims and
        Nodes; then stop the process and remove what is left (finalizers included), so no
        object waits on a Karpenter that is gone.

        Raises:
            ControlPlaneError: Karpenter left NodeClaims or Nodes (removed here all the same).
        """
        leftovers: list[str] = []
        try:
            with self.api_client() as api:
                custom = client.CustomObjectsApi(api)
                for pool in self.node_pools:
                    _delete(
                        lambda name: custom.delete_cluster_custom_object(
                            GROUP, VERSION, "nodepools", name
                        ),
                        pool.name,
                    )
                if self.component is not None and self.component.running:
                    self._poll(lambda: _launched(api), "NodeClaims and Nodes removed", cleanup=True)
        except ControlPlaneError as error:
            leftovers.append(str(error))
        finally:
            if self.component is not None:
                self.component.stop()
            with self.api_client() as api:
                _remove_launched(api)
        if leftovers:
            raise ControlPlaneError(f"Karpenter did not remove its nodes: {leftovers[0]}")

    def __enter__(self) -> KarpenterProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- startup -------------------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        catalog = self.run_dir / "instance-types.json"
        catalog.write_text(catalog_json(self.catalog))
        return {
            **os.environ,
            "KUBECONFIG": str(self.api.kubeconfig),
            "DISABLE_LEADER_ELECTION": "true",
            "HEALTH_PROBE_PORT": str(self.ports.health),
            "METRICS_PORT": str(self.ports.metrics),
            "INSTANCE_TYPES_FILE_PATH": str(catalog),
            # a short batch window: a test's pending pod is provisioned for in about 2 s
            "BATCH_IDLE_DURATION": "1s",
            "BATCH_MAX_DURATION": "2s",
            "LOG_LEVEL": "info",
        }

    def _install(self, api: client.ApiClient) -> None:
        extensions = client.ApiextensionsV1Api(api)
        crds = [yaml.safe_load(path.read_text()) for path in sorted(self.bin_dir.glob("crds/*"))]
        for crd in crds:
            _create_or_replace(extensions, "custom_resource_definition", crd)
        names = [crd["metadata"]["name"] for crd in crds]
        self._poll(lambda: _not_established(extensions, names), "CRDs established")
        custom = client.CustomObjectsApi(api)
        node_class = {
            "apiVersion": f"{NODE_CLASS_GROUP}/{NODE_CLASS_VERSION}",
            "kind": NODE_CLASS_KIND,
            "metadata": {"name": NODE_CLASS},
        }
        _create(
            lambda body: custom.create_cluster_custom_object(
                NODE_CLASS_GROUP, NODE_CLASS_VERSION, "kwoknodeclasses", body
            ),
            node_class,
        )
        for pool in self.node_pools:
            _create(
                lambda body: custom.create_cluster_custom_object(GROUP, VERSION, "nodepools", body),
                node_pool(pool),
            )

    def _poll(self, probe: Probe, what: str, *, cleanup: bool = False) -> None:
        timeout = self.cleanup_timeout_s if cleanup else self.startup_timeout_s
        deadline = self._clock() + timeout
        while (why := probe()) is not None:
            if self._clock() > deadline:
                raise ControlPlaneError(
                    f"{what}: not after {timeout:.0f} s on {self.api.url} ({why})"
                )
            self._sleep(0.5)


def start_karpenter(
    bin_dir: Path,
    api: ApiServer,
    run_dir: Path,
    *,
    node_pools: Sequence[PoolSpec] = DEFAULT_POOLS,
    catalog: Sequence[KwokShape] = CATALOG,
    startup_timeout_s: float = 120.0,
) -> KarpenterProcess:
    """Start a `KarpenterProcess` (arguments as in its constructor) and return it, ready; use
    it as a context manager, or call `stop()`, to leave no process, NodeClaim or Node behind."""
    karpenter = KarpenterProcess(
        bin_dir,
        api,
        run_dir,
        node_pools=node_pools,
        catalog=catalog,
        startup_timeout_s=startup_timeout_s,
    )
    return karpenter.start()


def launched_nodes(core: client.CoreV1Api) -> list[str]:
    """The names of the Nodes the kwok provider created (`spec.providerID` `kwok://…`)."""
    return [
        node.metadata.name
        for node in core.list_node().items
        if (node.spec.provider_id or "").startswith(PROVIDER_PREFIX)
    ]


def _launched(api: client.ApiClient) -> str | None:
    """What Karpenter still has launched, or None."""
    claims = client.CustomObjectsApi(api).list_cluster_custom_object(GROUP, VERSION, "nodeclaims")
    names = [c["metadata"]["name"] for c in claims["items"]]
    nodes = launched_nodes(client.CoreV1Api(api))
    if names or nodes:
        return f"NodeClaims {names}, Nodes {nodes}"
    return None


def _remove_launched(api: client.ApiClient) -> None:
    """Delete every NodeClaim and kwok Node, dropping their finalizers (nothing serves them
    once Karpenter has stopped)."""
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    no_finalizers = {"metadata": {"finalizers": None}}
    for claim in custom.list_cluster_custom_object(GROUP, VERSION, "nodeclaims")["items"]:
        name = claim["metadata"]["name"]
        _delete(
            lambda n: custom.patch_cluster_custom_object(
                GROUP, VERSION, "nodeclaims", n, no_finalizers
            ),
            name,
        )
        _delete(
            lambda n: custom.delete_cluster_custom_object(GROUP, VERSION, "nodeclaims", n), name
        )
    for name in launched_nodes(core):
        _delete(lambda n: core.patch_node(n, no_finalizers), name)
        _delete(core.delete_node, name)
