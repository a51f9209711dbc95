"""Right-sizing on the local backend: in-place growth vs OOM relaunch vs a generous size, and
`memory="auto"` vs a declared size.

A step of 20 work units (0.1 s each, no checkpoint) that grows by 40Mi per unit from unit 8
on, to about 500Mi, declared with 256Mi, runs three ways on the same `LocalBackend` setup:
- in place: `oom_escalation.grow_at: 0.85`, its limit raised while it runs (256Mi → ...);
- OOM relaunch: killed at its limit and relaunched with memory × 2 (the executor's decision);
- generous: declared with 2Gi from the start (the baseline).
Prints wall time and units redone for each, the ratio in place / generous (target ≤ 1.05
with zero units redone), and for `auto`: requested memory-seconds over used (peak × wall
time) after one run at a declared 2Gi, against that declared size's ratio (target ≤ 1.5).

Run: `python -m benchmarks.bench_right_sizing [--rounds N]` (median of N rounds, default 2).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from k8s_ai_orchestrator.backends.base import LaunchRequest, MemoryGrowth, ResourceUsage
from k8s_ai_orchestrator.backends.local import AdmissionLedger, LocalBackend, LocalCapacity
from k8s_ai_orchestrator.launch.autosize import AutoSizing, UsageRecord, size_from_history
from k8s_ai_orchestrator.launch.relaunch import RelaunchPolicy, StepHistory, decide
from k8s_ai_orchestrator.spec import ComputeSpec

MiB, GiB = 1024**2, 1024**3
UNITS, UNIT_S, GROW_FROM, MIB_PER_UNIT = 20, 0.1, 8, 40
GENEROUS, IN_PLACE = "generous static 2Gi", "in place (grow_at 0.85)"
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
    backend: LocalBackend, spec: ComputeSpec, out: Path, escalate: bool
) -> tuple[float, list[ResourceUsage]]:
    """Wall seconds from the first submit to success, and each attempt's usage."""
    argv = [sys.executable, "-c", STEP, str(out), *map(str, (UNITS, UNIT_S, GROW_FROM))]
    argv.append(str(MIB_PER_UNIT))
    history, usages, start = StepHistory("grower"), [], time.perf_counter()
    while True:
        history = history.launched(spec.memory_bytes)
        request = LaunchRequest("bench", "grower", len(usages), argv, {}, spec)
        handle = backend.submit(request)
        while not (status := backend.status(handle)).is_terminal:
            time.sleep(0.01)
        usages.append(backend.usage(handle))
        if status.exit_code == 0:
            return time.perf_counter() - start, usages
        decision = decide(RelaunchPolicy(), history, str(status.reason))
        if not escalate or not decision.relaunch or decision.memory_bytes is None:
            raise SystemExit(f"the step failed: {status.reason} {status.message}")
        spec = spec.with_memory(decision.memory_bytes)


def _backend(folder: Path, growth: MemoryGrowth | None) -> LocalBackend:
    capacity = LocalCapacity(cpus=2, memory_bytes=4 * GiB)
    return LocalBackend(capacity, ledger=AdmissionLedger(folder / "ledger"), growth=growth)


def _redone(out: Path) -> int:
    return len(out.read_text().splitlines()) - UNITS


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    growth = MemoryGrowth(grow_at=0.85, factor=2.0, max_memory_bytes=4 * GiB)
    ways = {
        GENEROUS: (2 * GiB, None, False),
        IN_PLACE: (256 * MiB, growth, False),
        "OOM relaunch (× 2)": (256 * MiB, None, True),
    }
    walls: dict[str, list[float]] = {label: [] for label in ways}
    notes: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for round_ in range(args.rounds):
            for n, (label, (memory, policy, escalate)) in enumerate(ways.items()):
                backend, out = _backend(folder, policy), folder / f"units-{round_}-{n}.txt"
                wall, usages = _run_until_done(backend, ComputeSpec(1, memory), out, escalate)
                backend.close()
                walls[label].append(wall)
                notes[label] = f"{len(usages)} attempt(s), {_redone(out)} units redone"
        grown_to = (UNITS - GROW_FROM) * MIB_PER_UNIT
        print(f"a {UNITS}-unit step growing to ~{grown_to}Mi, no checkpoint, declared 256Mi")
        print(f"({args.rounds} rounds, median wall time)")
        for label in ways:
            rounds = ", ".join(f"{t:.2f}" for t in walls[label])
            median = statistics.median(walls[label])
            print(f"  {label:<26} {median:6.2f} s  [{rounds}]  {notes[label]}")
        ratio = statistics.median(walls[IN_PLACE]) / statistics.median(walls[GENEROUS])
        print(f"  in place / generous: {ratio:.3f} (target <= 1.05, zero units redone)")
        _auto(folder)


def _auto(folder: Path) -> None:
    declared = ComputeSpec(1, 2 * GiB, memory_auto=True)
    backend = _backend(folder, None)
    _, (first,) = _run_until_done(backend, declared, folder / "auto-1.txt", False)
    record = UsageRecord("declared-run", None, peak_memory_bytes=first.max_rss_bytes)
    sizing = size_from_history("grower", declared, [record], AutoSizing(), 4 * GiB, 2.0)
    _, (second,) = _run_until_done(backend, sizing.spec, folder / "auto-2.txt", False)
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


if __name__ == "__main__":
    main()
