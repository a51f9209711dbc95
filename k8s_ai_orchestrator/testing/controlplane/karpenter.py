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

Its instance types and NodePools are `karpenterpools.py`'s: a catalog file of our own (the
provider's built-in catalog holds only CPU, memory, pods and ephemeral storage, no GPUs).

Example:
    >>> with start_karpenter(bin_dir, plane.host, run_dir) as karpenter:  # doctest: +SKIP
    ...     print(karpenter.ready_after_s)
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from kubernetes import client, config

from .apiobjects import create_if_absent, create_or_replace, delete_if_present, not_established
from .cluster import ApiServer
from .karpenterpools import (
    CATALOG,
    DEFAULT_POOLS,
    GROUP,
    NODE_CLASS,
    NODE_CLASS_GROUP,
    NODE_CLASS_KIND,
    NODE_CLASS_VERSION,
    PROVIDER_PREFIX,
    VERSION,
    KwokShape,
    PoolSpec,
    catalog_json,
    node_pool,
)
from .process import Component, ControlPlaneError, HttpsTarget, Probe, free_port

Obj = dict[str, Any]

LOOPBACK = "127.0.0.1"


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
                    delete_if_present(
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
            create_or_replace(extensions, "custom_resource_definition", crd)
        names = [crd["metadata"]["name"] for crd in crds]
        self._poll(lambda: not_established(extensions, names), "CRDs established")
        custom = client.CustomObjectsApi(api)
        node_class = {
            "apiVersion": f"{NODE_CLASS_GROUP}/{NODE_CLASS_VERSION}",
            "kind": NODE_CLASS_KIND,
            "metadata": {"name": NODE_CLASS},
        }
        create_if_absent(
            lambda body: custom.create_cluster_custom_object(
                NODE_CLASS_GROUP, NODE_CLASS_VERSION, "kwoknodeclasses", body
            ),
            node_class,
        )
        for pool in self.node_pools:
            create_if_absent(
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
        delete_if_present(
            lambda n: custom.patch_cluster_custom_object(
                GROUP, VERSION, "nodeclaims", n, no_finalizers
            ),
            name,
        )
        delete_if_present(
            lambda n: custom.delete_cluster_custom_object(GROUP, VERSION, "nodeclaims", n), name
        )
    for name in launched_nodes(core):
        delete_if_present(lambda n: core.patch_node(n, no_finalizers), name)
        delete_if_present(core.delete_node, name)
