"""Big and GPU steps on node pools scaled from zero vs the same steps on a pool kept warm.

The cluster: the real control plane (v1.37.2, one vCluster-style tenant through our syncer)
with no node of its own; real Karpenter v1.14 (its kwok provider, `scripts/build-karpenter.sh`)
creates the nodes from the test plane's NodePools (`karpenterpools.DEFAULT_POOLS`: `cpu`,
`highmem` with the 96 CPU / 768Gi shape, `gpu` with the 8-GPU shape), and the node agent adopts
them, `--boot-s` after Karpenter created them (a real machine boots and its kubelet registers;
kwok's Nodes have nothing to boot, so 0 is the floor).

The pipeline, through `KubernetesBackend` (the executor's own backend and pre-flight, the
tenant's `node_pools` declaring the pools): `prep` (4 CPU) → `mosaic` (xl: 72 CPU / 450Gi) and
`embed` (gpu-8) in parallel → `report` (2 CPU), each working `--work-s` seconds; every step's
pods select the pools' label.

Run two ways:
- (a) from zero: no node exists when `prep` is submitted; the pools consolidate a node 5 s
  after its last pod ended (`consolidateAfter: 5s`);
- (b) warm: the same NodePools with consolidation off, their nodes made beforehand by one
  placeholder pod per step shape (deleted before the pipeline starts).

Prints the wall time (first submit → last step done), node-seconds paid (each node from its
creation to its deletion: in (a) until the last node is consolidated; in (b) during the
pipeline only, although a warm pool is paid around the clock) and the share of node-seconds
with no step running (a step runs from its Running to its end, as the backend reports).
Target: (a)'s wall time ≤ (b)'s + (the boot time + 10 s) per stage that needs new nodes: what
the executor adds to scale-from-zero is its pre-flight and its Pending passes, never a wait of
its own. The idle node-seconds of (a) are the pools' consolidation tail (`consolidateAfter`,
then Karpenter's disruption pass), set by the pools, not the executor; the warm pool is also
shown kept for an hour, as a pool that serves a pipeline running hourly is.

Run: `python -m benchmarks.bench_autoscale [--work-s 20] [--boot-s 0]` (the control plane from
`scripts/build-kubeplane.sh`, Karpenter from `scripts/build-karpenter.sh`).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kubernetes.client import CoreV1Api

from k8s_ai_orchestrator.backends.base import JobHandle, LaunchRequest, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.spec import resolve_spec
from k8s_ai_orchestrator.testing.controlplane import build_kubeplane, start_control_plane
from k8s_ai_orchestrator.testing.controlplane.binary import build_karpenter
from k8s_ai_orchestrator.testing.controlplane.karpenter import start_karpenter
from k8s_ai_orchestrator.testing.controlplane.karpenterpools import (
    AUTOSCALED,
    DEFAULT_POOLS,
    NODEPOOL_LABEL,
    declared_pools,
)
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.priorityclasses import install_priority_classes

ROOT = Path(__file__).resolve().parents[1]
TENANT, NAMESPACE = "team-a", "default"
POLL_S = 0.25
Stages = tuple[tuple[tuple[str, dict[str, Any]], ...], ...]  # each step: (name, size fields)
# the pipeline's stages
STAGES: Stages = (
    (("prep", {"cpu": 4, "memory": "8Gi"}),),
    (
        ("mosaic", {"cpu": 72, "memory": "450Gi"}),
        ("embed", {"cpu": 8, "memory": "64Gi", "gpu": 8}),
    ),
    (("report", {"cpu": 2, "memory": "4Gi"}),),
)
STAGE_SLACK_S = 10.0  # per stage that waits for new nodes: Karpenter's batch, our pending pass


@dataclass
class NodeLife:
    """When a node Karpenter launched was first and last seen (seconds since the epoch)."""

    pool: str
    created: float
    gone: float | None = None


@dataclass
class Outcome:
    """One way of running the pipeline."""

    wall_s: float
    paid_node_s: float
    busy_node_s: float
    nodes: dict[str, NodeLife] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    @property
    def idle_share(self) -> float:
        return 1 - self.busy_node_s / self.paid_node_s if self.paid_node_s else 0.0


class NodeWatch:
    """Polls the Nodes Karpenter launched: their lifetimes."""

    def __init__(self, core: CoreV1Api) -> None:
        self.core = core
        self.lives: dict[str, NodeLife] = {}

    def poll(self) -> list[str]:
        now = time.time()
        present = {
            n.metadata.name: n for n in self.core.list_node(label_selector=NODEPOOL_LABEL).items
        }
        for name, node in present.items():
            if name not in self.lives:
                created = node.metadata.creation_timestamp.timestamp()
                self.lives[name] = NodeLife(node.metadata.labels[NODEPOOL_LABEL], created)
        for name, life in self.lives.items():
            if name not in present and life.gone is None:
                life.gone = now
        return sorted(present)


def step_request(name: str, size: dict[str, Any], work_s: float, run_id: str) -> LaunchRequest:
    spec = resolve_spec(size)
    code = f"import time; time.sleep({work_s})"
    return LaunchRequest(run_id, name, 0, [sys.executable, "-c", code], {}, spec, TENANT)


def backend_for(kube: RealKube) -> KubernetesBackend:
    raw = {
        "image": "k8s-ai-bench:latest",
        "python": sys.executable,
        "step_k8s_config": {"pod_spec_config": {"node_selector": dict(AUTOSCALED)}},
        "tenants": {
            TENANT: {
                "kubeconfig": kube.tenant(TENANT).kubeconfig_path,
                "namespace": NAMESPACE,
                "node_pools": declared_pools(),
            }
        },
    }
    return KubernetesBackend(
        KubernetesConfig.from_dict(raw), allowed_tenants=[TENANT], default_tenant=TENANT
    )


@dataclass
class Run:
    """One pass of the pipeline."""

    start: float  # seconds since the epoch
    end: float
    busy_node_s: float  # step-seconds running (each step holds one node)
    failures: list[str]


def run_pipeline(
    kube: RealKube, watch: NodeWatch, work_s: float, stages: Stages = STAGES, prefix: str = ""
) -> Run:
    """Each stage's steps submitted at once, the next stage once they all ended."""
    backend = backend_for(kube)
    run_id = f"bench-{uuid.uuid4().hex[:6]}"
    busy, failures = 0.0, []
    start = time.time()
    try:
        for stage in stages:
            handles: dict[str, JobHandle] = {
                name: backend.submit(step_request(prefix + name, size, work_s, run_id))
                for name, size in stage
            }
            running: dict[str, float] = {}
            ended: dict[str, float] = {}
            while len(ended) < len(handles):
                watch.poll()
                for name, handle in handles.items():
                    if name in ended:
                        continue
                    status = backend.status(handle)
                    if status.state == StepState.RUNNING:
                        running.setdefault(name, time.time())
                    if status.is_terminal:
                        ended[name] = time.time()
                        if status.state != StepState.SUCCEEDED:
                            failures.append(f"{name}: {status.state.value} {status.message}")
                time.sleep(POLL_S)
            busy += sum(ended[n] - running.get(n, ended[n]) for n in ended)
    finally:
        backend.close()
    return Run(start, time.time(), busy, failures)


def paid_node_s(lives: dict[str, NodeLife], start: float, end: float) -> float:
    """Node-seconds of the nodes' lifetimes within [start, end]."""
    return sum(
        max(0.0, min(life.gone or end, end) - max(life.created, start)) for life in lives.values()
    )


def wait_nodes(watch: NodeWatch, timeout_s: float) -> None:
    """Until no launched node is left."""
    deadline = time.monotonic() + timeout_s
    while watch.poll():
        if time.monotonic() > deadline:
            raise TimeoutError(f"launched nodes: {watch.poll()} after {timeout_s:.0f} s")
        time.sleep(POLL_S)


def from_zero(kube: RealKube, karpenter_dir: Path, work: Path, work_s: float) -> Outcome:
    """(a): no node when the pipeline starts; paid until the last node is consolidated."""
    assert kube.plane.host is not None
    with start_karpenter(karpenter_dir, kube.plane.host, work / "karpenter-a"):
        watch = NodeWatch(CoreV1Api(kube.host.api_client()))
        run = run_pipeline(kube, watch, work_s)
        wait_nodes(watch, 300)
    last = max((life.gone or run.end for life in watch.lives.values()), default=run.end)
    paid = paid_node_s(watch.lives, run.start, last)
    return Outcome(run.end - run.start, paid, run.busy_node_s, watch.lives, run.failures)


def warm(kube: RealKube, karpenter_dir: Path, work: Path, work_s: float) -> Outcome:
    """(b): the pools' nodes made beforehand and kept; paid during the pipeline only."""
    assert kube.plane.host is not None
    pools = [replace(pool, consolidate_after="Never") for pool in DEFAULT_POOLS]
    with start_karpenter(karpenter_dir, kube.plane.host, work / "karpenter-b", node_pools=pools):
        watch = NodeWatch(CoreV1Api(kube.host.api_client()))
        # every stage at once, 2 s each: a node for each shape, kept once they end
        every_shape = (tuple(step for stage in STAGES for step in stage),)
        warming = run_pipeline(kube, watch, 2.0, every_shape, prefix="warm-")
        run = run_pipeline(kube, watch, work_s)
        run.failures[:0] = warming.failures
    paid = paid_node_s(watch.lives, run.start, run.end)
    return Outcome(run.end - run.start, paid, run.busy_node_s, watch.lives, run.failures)


@contextmanager
def empty_plane(work: Path, boot_s: float) -> Iterator[RealKube]:
    """The real control plane with one tenant and no node of its own."""
    bin_dir = build_kubeplane(ROOT / "scripts" / "build-kubeplane.sh", check_only=True)
    with start_control_plane(bin_dir, work / "plane", tenants=[TENANT]) as plane:
        with RealKube(plane, [], work / "nodes", node_boot_s=boot_s) as kube:
            install_priority_classes(kube.tenant(TENANT).api_client())
            yield kube


def report(label: str, outcome: Outcome) -> None:
    pools: dict[str, int] = {}
    for life in outcome.nodes.values():
        pools[life.pool] = pools.get(life.pool, 0) + 1
    print(
        f"{label}: wall {outcome.wall_s:.1f} s, nodes {dict(sorted(pools.items()))}, "
        f"node-seconds paid {outcome.paid_node_s:.0f}, busy {outcome.busy_node_s:.0f}, "
        f"idle share {outcome.idle_share:.2f}"
    )
    for failure in outcome.failures:
        print(f"  FAILED {failure}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-s", type=float, default=20.0, help="seconds each step works")
    parser.add_argument("--boot-s", type=float, default=0.0, help="a new node's time to join")
    args = parser.parse_args()
    karpenter_dir = build_karpenter(ROOT / "scripts" / "build-karpenter.sh", check_only=True)
    with tempfile.TemporaryDirectory(prefix="k8sai-bench-autoscale-") as tmp:
        work = Path(tmp)
        with empty_plane(work, args.boot_s) as kube:
            cold = from_zero(kube, karpenter_dir, work, args.work_s)
            report("(a) from zero", cold)
            hot = warm(kube, karpenter_dir, work, args.work_s)
            report("(b) warm     ", hot)
    allowed = hot.wall_s + len(STAGES) * (args.boot_s + STAGE_SLACK_S)
    hourly = len(hot.nodes) * 3600
    print(
        f"wall (a)/(b) {cold.wall_s / hot.wall_s:.2f}: (a) {cold.wall_s - hot.wall_s:+.1f} s "
        f"(target: (a) ≤ {allowed:.0f} s, (b) + {len(STAGES)} stages × (boot + "
        f"{STAGE_SLACK_S:.0f} s)); idle node-seconds (a) {cold.paid_node_s - cold.busy_node_s:.0f} "
        f"(the pools' consolidation after each node's last step) vs (b) "
        f"{hot.paid_node_s - hot.busy_node_s:.0f} in the pipeline's window alone; the warm pool "
        f"kept for an hour pays {hourly} node-seconds, (a) {cold.paid_node_s:.0f} per run"
    )
    if cold.failures or hot.failures or cold.wall_s > allowed:
        sys.exit(1)


if __name__ == "__main__":
    main()
