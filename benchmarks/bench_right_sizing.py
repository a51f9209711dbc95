"""Right-sizing: in-place growth vs OOM relaunch vs a generous size, and `memory="auto"` vs a
declared size, on the local backend or on the real Kubernetes control plane.

A step of 20 work units (no checkpoint) that grows by 40Mi per unit from unit 8 on, to about
500Mi, declared with 256Mi, runs three ways on the same backend setup:
- in place: `oom_escalation.grow_at`, its limit raised while it runs (256Mi → ...);
- OOM relaunch: killed at its limit and relaunched with memory × 2 (the executor's decision);
- generous: declared with 2Gi from the start (the baseline).
Prints wall time and units redone for each, the ratio in place / generous (target ≤ 1.05
with zero units redone), and for `auto`: requested memory-seconds over used (peak × wall
time) after one run at a declared 2Gi, against that declared size's ratio (target ≤ 1.5).

Backends:
- `local` (default): units of 0.1 s, `grow_at: 0.85` (memory sampled every 50 ms);
- `kubernetes`: the real v1.37 control plane (node agent, one vCluster-style tenant, built by
  `scripts/build-kubeplane.sh`); the step is a Job's pod, its memory read from the node's
  kubelet summary once a second and grown through `pods/resize`. Units of 1 s and
  `grow_at: 0.6`, so the 40Mi/s growth leaves the 1 s sampling and the resize's way through
  the tenant and the host time to act before the limit.

- `realnode`: the real control plane's host with one real node (kubelet v1.37.2, containerd,
  runc; `scripts/build-node.sh`, run as root): the step is a container on this machine's kernel,
  OOM-killed by it, its memory read from its own reports and grown by the real kubelet. Units of
  1 s and `grow_at: 0.6`, as on `kubernetes`.

With `--slow`, a slow climber instead: 300 units that each add 1.5Mi (15Mi/s on `local`, to
about 450Mi over the step process's own memory), run in place two ways only: grown by its
climb (the policy) and by the factor alone (× 2 each time); the memory held over what it used
shows what sizing by the climb saves (`waste_unused_memory` in the cost figures).

With `--trend`, `memory="auto"` over a series of runs instead: 7 runs of the step whose data
grows by a quarter a run (then 7 whose data shrinks by a fifth), each sized from the runs
before it (declared 2Gi for the first), with OOM relaunch × 2 on; sized by the peaks' trend
(the policy) and by the highest peak (`auto_sizing.trend: false`, the baseline). Prints the
attempts, units redone and memory held over used (GiB-s over all attempts; used = peak ×
wall time of the attempt that succeeded) for each.

Run: `python -m benchmarks.bench_right_sizing [--backend local|kubernetes|realnode] [--rounds N]
[--slow | --trend]` (median of N rounds, default 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from k8s_ai_orchestrator.backends.base import (
    Backend,
    FailureReason,
    LaunchRequest,
    ResourceUsage,
)
from k8s_ai_orchestrator.backends.local import AdmissionLedger, LocalBackend, LocalCapacity
from k8s_ai_orchestrator.launch.autosize import AutoSizing, UsageRecord, size_from_history
from k8s_ai_orchestrator.launch.relaunch import RelaunchPolicy, StepHistory, decide
from k8s_ai_orchestrator.memorygrowth import MemoryGrowth
from k8s_ai_orchestrator.spec import ComputeSpec

MiB, GiB = 1024**2, 1024**3


@dataclass(frozen=True)
class Climb:
    """The step's work: `units` units, each adding `mib_per_unit` from unit `grow_from` on."""

    units: int = 20
    grow_from: int = 8
    mib_per_unit: float = 40


FAST, SLOW = Climb(), Climb(units=300, grow_from=0, mib_per_unit=1.5)
GENEROUS, IN_PLACE, RELAUNCH = "generous static 2Gi", "in place", "OOM relaunch (× 2)"
BY_FACTOR = "in place, × 2 each time"


@dataclass(frozen=True)
class FactorOnly(MemoryGrowth):
    """In-place growth by the factor alone, whatever the step's climb (the growth before it
    was sized by the climb): the baseline for the memory the climb's sizing saves."""

    def target(
        self, limit_bytes: int, used_bytes: float, rate_bytes_per_s: float | None = None
    ) -> int | None:
        return super().target(limit_bytes, used_bytes, None)


@dataclass(frozen=True)
class Target:
    """Where the step runs: a backend factory and its pace."""

    name: str
    unit_s: float  # seconds per work unit
    grow_at: float
    make: Any  # (folder, growth) -> Backend


STEP = """
import sys, time
out, units, unit_s, grow_from, mib = sys.argv[1], *map(float, sys.argv[2:6])
held = []
for unit in range(int(units)):
    for _ in range(10):
        if unit >= grow_from:
            block = bytearray(int(mib / 10 * 1024**2))
            for i in range(0, len(block), 4096):
                block[i] = 1
            held.append(block)
        time.sleep(unit_s / 10)
    with open(out, "a") as f:
        f.write(f"{unit}\\n")
"""


def _run_until_done(
    backend: Backend,
    spec: ComputeSpec,
    out: Path,
    escalate: bool,
    unit_s: float,
    climb: Climb = FAST,
) -> tuple[float, list[ResourceUsage]]:
    """Wall seconds from the first submit to success, and each attempt's usage."""
    argv = [sys.executable, "-c", STEP, str(out), *map(str, (climb.units, unit_s))]
    argv += [str(climb.grow_from), str(climb.mib_per_unit)]
    history, usages, start = StepHistory("grower"), [], time.perf_counter()
    run_id = uuid.uuid4().hex[:12]
    while True:
        history = history.launched(spec.memory_bytes)
        request = LaunchRequest(run_id, "grower", len(usages), argv, {}, spec)
        handle = backend.submit(request)
        while not (status := backend.status(handle)).is_terminal:
            time.sleep(0.01)
        usages.append(backend.usage(handle))
        if status.exit_code == 0:
            return time.perf_counter() - start, usages
        decision = decide(RelaunchPolicy(), history, status.reason or FailureReason.ERROR)
        if not escalate or not decision.relaunch or decision.memory_bytes is None:
            raise SystemExit(f"the step failed: {status.reason} {status.message}")
        spec = spec.with_memory(decision.memory_bytes)


def _local(folder: Path, growth: MemoryGrowth | None) -> Backend:
    capacity = LocalCapacity(cpus=2, memory_bytes=4 * GiB)
    return LocalBackend(capacity, ledger=AdmissionLedger(folder / "ledger"), growth=growth)


@contextmanager
def _target(name: str, folder: Path) -> Iterator[Target]:
    if name == "local":
        yield Target("local backend", 0.1, 0.85, _local)
        return
    if name == "realnode":
        with _real_node(folder) as target:
            yield target
        return
    from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig

    from .k8s_runs import NAMESPACE, TENANT, control_plane_tenant

    with control_plane_tenant(folder) as kubeconfig:

        def make(_: Path, growth: MemoryGrowth | None) -> Backend:
            config = {
                "image": "ghcr.io/acme/bench:1",
                "python": sys.executable,
                "tenants": {TENANT: {"kubeconfig": kubeconfig, "namespace": NAMESPACE}},
            }
            return KubernetesBackend(
                KubernetesConfig.from_dict(config), default_tenant=TENANT, growth=growth
            )

        yield Target("real v1.37 control plane (tenant, node agent)", 1.0, 0.6, make)


@contextmanager
def _real_node(folder: Path) -> Iterator[Target]:
    from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from k8s_ai_orchestrator.testing.controlplane.realnode_steps import TENANT

    from .k8s_runs import real_node_host

    with real_node_host(folder, [folder]) as section:

        def make(_: Path, growth: MemoryGrowth | None) -> Backend:
            config = KubernetesConfig.from_dict(section)
            return KubernetesBackend(config, default_tenant=TENANT, growth=growth)

        yield Target("real node (kubelet v1.37, containerd, runc, the kernel)", 1.0, 0.6, make)


def _redone(out: Path, climb: Climb) -> int:
    return len(out.read_text().splitlines()) - climb.units


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--backend", choices=("local", "kubernetes", "realnode"), default="local")
    parser.add_argument("--slow", action="store_true", help="a slow climber, in place only")
    parser.add_argument("--trend", action="store_true", help='memory="auto" over runs only')
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, _target(args.backend, Path(tmp)) as target:
        if args.trend:
            for label, rate in (("grows by 25 %", 1.25), ("shrinks by 20 %", 0.8)):
                _trend(target, Path(tmp), label, rate)
            return
        _compare(target, Path(tmp), args.rounds, SLOW if args.slow else FAST)
        if not args.slow:
            _auto(target, Path(tmp))


def _compare(target: Target, folder: Path, rounds: int, climb: Climb) -> None:
    growth = MemoryGrowth(grow_at=target.grow_at, factor=2.0, max_memory_bytes=4 * GiB)
    by_factor = FactorOnly(grow_at=target.grow_at, factor=2.0, max_memory_bytes=4 * GiB)
    ways = {
        GENEROUS: (2 * GiB, None, False),
        IN_PLACE: (256 * MiB, growth, False),
        BY_FACTOR: (256 * MiB, by_factor, False),
        RELAUNCH: (256 * MiB, None, True),
    }
    if climb is SLOW:
        ways = {label: ways[label] for label in (IN_PLACE, BY_FACTOR)}
    walls: dict[str, list[float]] = {label: [] for label in ways}
    held: dict[str, list[tuple[float, float]]] = {label: [] for label in ways}
    notes: dict[str, str] = {}
    for round_ in range(rounds):
        for n, (label, (memory, policy, escalate)) in enumerate(ways.items()):
            backend, out = target.make(folder, policy), folder / f"units-{round_}-{n}.txt"
            spec = ComputeSpec(1, memory)
            wall, usages = _run_until_done(backend, spec, out, escalate, target.unit_s, climb)
            backend.close()
            walls[label].append(wall)
            last = usages[-1]  # reserved GiB-s vs used (peak × wall) of the attempt that ended
            held[label].append(
                (last.memory_gib_seconds, (last.max_rss_bytes or 0) / GiB * last.wall_seconds)
            )
            notes[label] = f"{len(usages)} attempt(s), {_redone(out, climb)} units redone"
    grown_to = (climb.units - climb.grow_from) * climb.mib_per_unit
    print(f"{target.name}: a {climb.units}-unit step ({target.unit_s} s each) growing by")
    print(f"~{grown_to:.0f}Mi, no checkpoint, declared 256Mi ({rounds} rounds, median wall time)")
    for label in ways:
        shown = f"{label} (grow_at {target.grow_at})" if label == IN_PLACE else label
        runs = ", ".join(f"{t:.2f}" for t in walls[label])
        median = statistics.median(walls[label])
        print(f"  {shown:<26} {median:6.2f} s  [{runs}]  {notes[label]}")
    if GENEROUS in ways:
        for label in (IN_PLACE, RELAUNCH):
            ratio = statistics.median(walls[label]) / statistics.median(walls[GENEROUS])
            print(f"  {label} / generous: {ratio:.3f}")
        print("  (target: in place <= 1.05 with zero units redone)")
    print("memory held / used by the last attempt (GiB-s; used = peak × wall time)")
    for label in (IN_PLACE, BY_FACTOR):
        reserved = statistics.median(r for r, _ in held[label])
        used = statistics.median(u for _, u in held[label])
        print(f"  {label:<26} {reserved:6.2f} / {used:5.2f}  ratio {reserved / used:.2f}")


def _auto(target: Target, folder: Path) -> None:
    declared = ComputeSpec(1, 2 * GiB, memory_auto=True)
    backend = target.make(folder, None)
    _, (first,) = _run_until_done(backend, declared, folder / "auto-1.txt", False, target.unit_s)
    record = UsageRecord("declared-run", None, peak_memory_bytes=first.max_rss_bytes)
    sizing = size_from_history("grower", declared, [record], AutoSizing(), 4 * GiB, 2.0)
    _, (second,) = _run_until_done(
        backend, sizing.spec, folder / "auto-2.txt", False, target.unit_s
    )
    backend.close()
    print("memory-seconds requested / used (used = peak × wall time)")
    for label, usage in (
        ("declared 2Gi", first),
        (f"auto → {sizing.spec.memory_quantity}", second),
    ):
        used = (usage.max_rss_bytes or 0) / GiB * usage.wall_seconds
        ratio = usage.memory_gib_seconds / used
        print(
            f"  {label:<26} {usage.memory_gib_seconds:6.2f} GiB-s / {used:5.2f}  ratio {ratio:.2f}"
        )
    print(f"  ({sizing.note}; target: auto <= 1.5)")


TREND_RUNS = 7  # runs in a --trend series
TREND_START_MIB = {1.25: 20.0, 0.8: 60.0}  # the first run's growth per unit, by rate


def _trend(target: Target, folder: Path, label: str, rate: float) -> None:
    """`memory="auto"` over `TREND_RUNS` runs whose data changes by `rate` a run, sized by the
    trend and by the highest peak; OOM relaunch on."""
    print(f'{target.name}: memory="auto" over {TREND_RUNS} runs whose data {label} a run')
    for trend in (True, False):
        backend, records = target.make(folder, None), []
        attempts = redone = 0
        held = used = 0.0
        sizes = []
        for run in range(TREND_RUNS):
            climb = Climb(mib_per_unit=TREND_START_MIB[rate] * rate**run)
            declared = ComputeSpec(1, 2 * GiB, memory_auto=True)
            policy = AutoSizing(trend=trend)
            sizing = size_from_history("grower", declared, records, policy, 4 * GiB, 2.0)
            out = folder / f"trend-{trend}-{rate}-{run}.txt"
            _, usages = _run_until_done(backend, sizing.spec, out, True, target.unit_s, climb)
            peak = max(u.max_rss_bytes or 0 for u in usages)
            records.insert(0, UsageRecord(f"run-{run}", None, peak_memory_bytes=peak))
            attempts, redone = attempts + len(usages), redone + _redone(out, climb)
            held += sum(u.memory_gib_seconds for u in usages)
            used += peak / GiB * usages[-1].wall_seconds
            sizes.append(sizing.spec.memory_quantity)
        backend.close()
        name = "by the trend" if trend else "highest peak"
        print(
            f"  {name:<13} {attempts:2d} attempts, {redone:3d} units redone, held / used "
            f"{held:6.2f} / {used:5.2f} GiB-s  ratio {held / used:.2f}  sizes {', '.join(sizes)}"
        )


if __name__ == "__main__":
    main()
