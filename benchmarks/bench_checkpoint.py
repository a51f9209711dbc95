"""Checkpoint benchmarks: throughput against raw file I/O, and work saved on preemption.

Run: `python -m benchmarks.bench_checkpoint [--gib 1] [--repeats 2] [--unit-ms 20]`
(`--gib 0` skips the throughput part, `--recovery-repeats 0` the recovery part).

1. Throughput: save + load of a `--gib` GiB state on `file://` — a pyarrow Table and raw
   bytes — against writing the same bytes to one file with fsync and reading them back, in
   the same process and directory. Printed: seconds and the ratio raw time / checkpoint time
   (1.0 = as fast as raw I/O; target >= 0.8).
2. Recovery: a 60-unit step that checkpoints every 5 units is preempted at unit 45 and
   relaunched with a fresh handle. Printed: units redone with checkpoints vs without (target
   <= 5 vs 45), and the preempted run's total time / (an undisturbed run + one relaunch)
   (target <= 1.15). Scenarios: a hard kill during unit 45, a hard kill just before a save
   (the worst case), and SIGTERM during unit 45 (the step saves at once and exits).
"""

from __future__ import annotations

import argparse
import hashlib
import multiprocessing
import os
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from k8s_ai_orchestrator.checkpoint import CheckpointHandle, CheckpointStore, Preempted

UNITS, EVERY, PREEMPT_AT = 60, 5, 45


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def raw_round_trip(path: Path, data: bytes) -> float:
    def write_and_read() -> None:
        with open(path, "wb", buffering=0) as f:
            f.write(data)
            os.fsync(f.fileno())
        into = bytearray(len(data))
        with open(path, "rb", buffering=0) as f:
            assert f.readinto(into) == len(data)

    seconds = timed(write_and_read)
    path.unlink()
    return seconds


def checkpoint_round_trip(store: CheckpointStore, key: str, state: bytes | pa.Table) -> float:
    def save_and_load() -> None:
        store.open(key).save(state)
        loaded = store.open(key).load()
        assert loaded is not None and len(loaded) == len(state)

    seconds = timed(save_and_load)
    store.open(key).clear()
    return seconds


def bench_throughput(workdir: Path, gib: float, repeats: int) -> None:
    size = int(gib * (1 << 30)) // 8 * 8
    data = os.urandom(size)
    table = pa.table(
        {"v": pa.Array.from_buffers(pa.int64(), size // 8, [None, pa.py_buffer(data)])}
    )
    store = CheckpointStore(root=f"file://{workdir}/ckpt", handle_signals=False)
    measure: dict[str, Callable[[], float]] = {
        "raw": lambda: raw_round_trip(workdir / "raw.bin", data),
        "table": lambda: checkpoint_round_trip(store, "table", table),
        "bytes": lambda: checkpoint_round_trip(store, "bytes", data),
        "sha256": lambda: timed(lambda: hashlib.sha256(data).digest()),
    }
    runs: dict[str, list[float]] = {name: [] for name in measure}
    names = list(measure)
    for r in range(repeats):  # rotate the order so no variant always runs first
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(measure[name]())
    raw = statistics.median(runs["raw"])
    print(f"\n== throughput: save + load of {size / (1 << 30):.2f} GiB on file:// (median of "
          f"{repeats}) ==")  # fmt: skip
    sha = statistics.median(runs["sha256"])
    print(f"raw write+fsync+read      {raw:6.2f} s   {size / raw / 1e6:7.0f} MB/s")
    print(
        f"sha256 of the state       {sha:6.2f} s   (CPU; a save and a load each hash once: "
        f"ratio {raw / (raw + 2 * sha):4.2f} if no hashing overlaps I/O, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f})"
    )
    for kind in ("table", "bytes"):
        seconds = statistics.median(runs[kind])
        print(
            f"checkpoint {kind:<6} save+load {seconds:6.2f} s   {size / seconds / 1e6:7.0f} MB/s   "
            f"ratio vs raw {raw / seconds:4.2f}  (target >= 0.80)"
        )


class Killed(Exception):
    """Stands for SIGKILL: the attempt ends here and nothing more is saved."""


@dataclass
class Attempt:
    units_started: list[int]
    seconds: float


def run_attempt(
    ckpt: CheckpointHandle, unit_s: float, kill_at: int | None, sigterm_at: int | None
) -> Attempt:
    """One attempt of the 60-unit step; returns which units it started and how long it took."""
    start, started = time.perf_counter(), []
    try:
        state = ckpt.load() or {"next": 0}
        for unit in range(int(state["next"]), UNITS):
            started.append(unit)
            if unit == kill_at:
                time.sleep(unit_s / 2)
                raise Killed
            if unit == sigterm_at:
                os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(unit_s)
            state = {"next": unit + 1}
            if (unit + 1) % EVERY == 0 or ckpt.due():
                ckpt.save(state, progress=unit + 1)
                ckpt.exit_if_preempted()
    except (Killed, Preempted):
        pass
    finally:
        ckpt.close()
    return Attempt(started, time.perf_counter() - start)


def scenario(store: CheckpointStore, key: str, unit_s: float, **preempt: int | None) -> Attempt:
    """Preempt once, relaunch with a fresh handle; units started are summed over both.

    A SIGTERM attempt runs in a child process: the notice stays with the process that got it,
    so only a fresh process can be the relaunch, as on a real cluster.
    """
    if preempt.get("sigterm_at") is not None:
        first = attempt_in_child(store, key, unit_s, preempt["sigterm_at"])
    else:
        first = run_attempt(store.open(key), unit_s, **preempt)  # type: ignore[arg-type]
    second = run_attempt(store.open(key), unit_s, None, None)
    store.open(key).clear()
    return Attempt(first.units_started + second.units_started, first.seconds + second.seconds)


def _child_attempt(root: str, key: str, unit_s: float, sigterm_at: int, out: Any) -> None:
    store = CheckpointStore(root=root, interval_s=3600)
    out.put(run_attempt(store.open(key), unit_s, None, sigterm_at))


def attempt_in_child(store: CheckpointStore, key: str, unit_s: float, sigterm_at: int) -> Attempt:
    context = multiprocessing.get_context("forkserver")
    results = context.Queue()
    child = context.Process(
        target=_child_attempt, args=(store.root, key, unit_s, sigterm_at, results)
    )
    child.start()
    attempt: Attempt = results.get(timeout=120)
    child.join(60)
    return attempt


CASES: list[tuple[str, dict[str, int | None]]] = [
    ("undisturbed", dict(kill_at=None, sigterm_at=None)),
    ("no checkpoints, killed in unit 45", {}),
    ("checkpoints, killed in unit 45", dict(kill_at=PREEMPT_AT, sigterm_at=None)),
    ("checkpoints, killed in unit 44 (worst)", dict(kill_at=44, sigterm_at=None)),
    ("checkpoints, SIGTERM in unit 45", dict(kill_at=None, sigterm_at=PREEMPT_AT)),
]


def run_case(store: CheckpointStore, name: str, unit_s: float, **preempt: int | None) -> Attempt:
    if not preempt:
        return scenario_without_checkpoints(unit_s, PREEMPT_AT)
    return scenario(store, name.replace(" ", "-"), unit_s, **preempt)


def bench_recovery(workdir: Path, unit_s: float, repeats: int) -> None:
    os.sync()
    store = CheckpointStore(root=f"file://{workdir}/rec", interval_s=3600, handle_signals=False)
    scenario(store, "warm-up", unit_s, kill_at=None, sigterm_at=None)
    store.open("probe").save({"next": PREEMPT_AT}, progress=PREEMPT_AT)
    relaunch_s = statistics.median(timed(lambda: store.open("probe").load()) for _ in range(5))
    runs: dict[str, list[Attempt]] = {name: [] for name, _ in CASES}
    for _ in range(repeats):  # interleaved, so drift in machine load hits every case alike
        for name, preempt in CASES:
            runs[name].append(run_case(store, name, unit_s, **preempt))
    median = {n: sorted(r, key=lambda a: a.seconds)[len(r) // 2] for n, r in runs.items()}
    baseline = median["undisturbed"].seconds + relaunch_s
    print(f"\n== recovery: {UNITS} units of {unit_s * 1000:.0f} ms, checkpoint every {EVERY}, "
          f"preempted at unit {PREEMPT_AT}, median of {repeats} ==")  # fmt: skip
    print(f"undisturbed run {median['undisturbed'].seconds:.2f} s; one relaunch (fresh handle + "
          f"load) {relaunch_s * 1000:.2f} ms")  # fmt: skip
    for name, _ in CASES[1:]:
        result = median[name]
        redone = len(result.units_started) - UNITS
        print(
            f"{name:<40} units redone {redone:3d}   total {result.seconds:5.2f} s   "
            f"ratio vs undisturbed+relaunch {result.seconds / baseline:4.2f}"
        )
    print("targets: units redone <= 5 with checkpoints (vs 45 without); ratio <= 1.15")


def scenario_without_checkpoints(unit_s: float, kill_at: int) -> Attempt:
    started: list[int] = []
    start = time.perf_counter()
    for attempt_kill in (kill_at, None):
        for unit in range(UNITS):
            started.append(unit)
            if unit == attempt_kill:
                time.sleep(unit_s / 2)
                break
            time.sleep(unit_s)
    return Attempt(started, time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--gib", type=float, default=1.0, help="state size for throughput")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--unit-ms", type=float, default=20.0)
    parser.add_argument("--recovery-repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="scratch folder (default: a temp folder)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-ckpt-", dir=args.dir))
    try:
        if args.gib > 0:
            bench_throughput(workdir, args.gib, args.repeats)
        if args.recovery_repeats > 0:
            bench_recovery(workdir, args.unit_ms / 1000, args.recovery_repeats)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
