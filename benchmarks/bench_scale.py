"""What the run worker costs per step as the fan-out grows: `ai_executor` vs `k8s_job_executor`.

Run: `python -m benchmarks.bench_scale [--targets control-plane,emulator] [--steps 100,1000]
[--concurrency 200] [--step-seconds 0] [--profile py-spy|cprofile|tracemalloc] [--out DIR]`;
plot saved results: `python -m benchmarks.bench_scale --plot IMAGE.png --plot-from A.json B.json`.

One Dagster job (`benchmarks.k8s_run_worker`: N ops fanned out, + 1 gather) runs under each
executor in its own run-worker process, against the same target and tenant, with the same
`max_concurrent` and the same arrival of steps (all N ready at once). The steps' pods run
`benchmarks/standin_step.py`, the same stand-in for both executors: it writes the events a
real step process writes (recorded from one real step at the start of each target) straight
into the run's event log, for ~20 ms of CPU instead of ~2 s, so the run worker is what is
measured. Printed per target, and written to `OUT/bench_scale-<target>.json`:
- per N and executor: run-worker CPU-seconds, peak RSS, API requests by kind (as counted by
  `k8s_run_worker`), launch -> running p50/p99 (Job created -> stand-in started), wall time,
  and the whole machine's busy CPU-seconds over the run ("machine": the plane, its nodes and
  the stand-ins as well; meaningful on a quiet machine: where it nears wall x cores, the
  machine, not the run worker, bounds the wall time);
- the marginal cost per added step (the slope between consecutive N) of CPU, RSS and requests,
  and ours / dagster-k8s. Targets (issue 23): marginal CPU <= 0.5x, marginal RSS and requests
  <= 1x and within +-20 % from the smallest to the largest N; launch p99 <= 1x at 1,000 steps.
`--profile` wraps each run worker in py-spy (stacks of whichever thread holds the GIL, with
the share of named functions printed) or cProfile (the main thread's CPU clock, with call
counts and CPU per call printed) or tracemalloc (the live heap at its largest, by call site:
what a run worker keeps as N grows) and writes the profile beside the JSON; the figures of a
profiled run include the profiler's cost. On 2 cores a 1,000-step point takes 8-9 minutes per
executor on the real control plane; `--executors ai` or `dagster-k8s` runs one side.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from k8s_ai_orchestrator.testing.controlplane import KubeplaneUnavailable
from k8s_ai_orchestrator.testing.kube import NodeSpec

from .k8s_runs import (
    ROOT,
    RunFigures,
    RunOptions,
    control_plane_tenant,
    emulator_tenant,
    exit_on_sigterm,
    percentile,
    run_worker,
)
from .local_postgres import LocalPostgres

EXECUTORS = {"ai": "fan_out_ai", "dagster-k8s": "fan_out_dagster_k8s"}
KINDS = ("create/delete", "log streams", "status reads", "pre-flight checks", "other")
# 110 pods a node: room for a few hundred concurrent stand-ins of either executor's size.
NODES = [NodeSpec(name=f"node-{i}", cpu="512", memory="2Ti") for i in range(4)]
STANDIN = ROOT / "benchmarks" / "standin_step.py"


def record_standin_events(target_dir: Path, kubeconfig: str, work: Path) -> dict[str, Path]:
    """Run one real step under dagster-k8s; keep what its step process wrote, per job.

    Returns a template file per executor (its job name filled in) for `standin_step.py`.
    """
    from dagster import DagsterInstance
    from dagster._serdes import serialize_value

    figures = run_worker("dagster-k8s", kubeconfig, work, 1, 0.0)
    with DagsterInstance.get() as instance:
        records = instance.get_records_for_run(figures.run_id).records
    events = [r.event_log_entry for r in records if r.event_log_entry.dagster_event]
    started = next(e for e in events if e.dagster_event.event_type_value == "STEP_WORKER_STARTED")
    pid = started.dagster_event.pid
    templates = []
    for entry in events:
        if entry.dagster_event.pid != pid:
            continue  # the run worker's own events
        raw = json.loads(serialize_value(entry))
        raw["timestamp"] = "__TS__"
        raw["dagster_event"]["pid"] = "__PID_NUMBER__"
        text = json.dumps(raw).replace(figures.run_id, "__RUN_ID__")
        text = text.replace("step_0", "__STEP_KEY__")  # key, op name, handles, messages
        text = text.replace(f"(pid: {pid})", "(pid: __PID__)")
        text = text.replace(f'"text": "{pid}"', '"text": "__PID__"')
        templates.append(text)
    files = {}
    for executor, job in EXECUTORS.items():
        path = target_dir / f"standin-events-{executor}.json"
        path.write_text(json.dumps([t.replace("fan_out_dagster_k8s", job) for t in templates]))
        files[executor] = path
    return files


def _profiler(kind: str, out: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(wrapper argv, run-worker args) for a profiled run writing to `out`."""
    if kind == "py-spy":
        spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        return (spy, "record", "--gil", "--format", "raw", "-r", "25", "-o", f"{out}.txt", "--"), ()
    if kind == "cprofile":
        return (), ("--cprofile", f"{out}.pstats")
    if kind == "tracemalloc":
        return (), ("--tracemalloc", f"{out}.heap.txt")
    return (), ()


# Where a run worker's CPU goes: inclusive share of py-spy's GIL-holding samples per name.
# Ours runs its own loop (`executor/loop.py`); dagster-k8s runs Dagster's StepDelegatingExecutor.
FOCUS = (
    ("startup: imports", "_find_and_load "),
    ("startup: DagsterInstance.get", "DagsterInstance.get "),
    ("executor loop: ours (StepLoop.run)", "StepLoop.run "),
    ("executor loop: dagster-k8s (StepDelegatingExecutor)", "StepDelegatingExecutor.execute "),
    ("  launch_step (either)", ".launch_step "),
    ("    Job create (HTTP)", "create_namespaced_job "),
    ("  health: ours (AIStepHandler.check)", "AIStepHandler.check "),
    ("  health: dagster-k8s (check_step_health)", "K8sStepHandler.check_step_health "),
    ("    step context (for_step)", "PlanOrchestrationContext.for_step "),
    ("  events read: ours (RunEvents.pop)", "RunEvents.pop "),
    ("  events read: dagster-k8s (_pop_events)", "._pop_events "),
    ("    event log read", "SqlEventLogStorage.get_records_for_run "),
    ("  finish_attempt (ours)", "AIStepHandler.finish_attempt "),
    ("  engine events written", "SqliteEventLogStorage.store_event "),
    ("  waits (sleep)", "time.sleep"),
    ("pod watch thread", "PodWatch._run "),
    ("log stream threads", "LogFollower._follow "),
    ("SQLite (all callers)", "sqlalchemy/engine/base.py"),
)


def summarize_profile(path: Path) -> dict[str, float]:
    """Inclusive share of samples (%) for each FOCUS name in py-spy's raw (collapsed) output."""
    counts = dict.fromkeys((label for label, _ in FOCUS), 0)
    total = 0
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        total += int(n)
        for label, needle in FOCUS:
            if needle in stack:
                counts[label] += int(n)
    return {label: round(100 * c / max(total, 1), 1) for label, c in counts.items()}


# (label, file suffix, function name) of the calls whose CPU cProfile reports per call.
HANDLERS = ("step_handler.py", "dagster_k8s/executor.py")  # ours, dagster-k8s's
CALLS = (
    ("events read: ours", "executor/loop.py", "pop"),
    ("events read: dagster-k8s", "step_delegating_executor.py", "_pop_events"),
    ("launch_step", HANDLERS, "launch_step"),
    ("health: ours (check)", "executor/step_handler.py", "check"),
    ("health: dagster-k8s (check_step_health)", "dagster_k8s/executor.py", "check_step_health"),
    ("step context (for_step)", "context/system.py", "for_step"),
    ("event log read", "sql_event_log.py", "get_records_for_run"),
    ("finish_attempt", "step_handler.py", "finish_attempt"),
    ("event written", "sqlite_event_log.py", "store_event"),
    ("Job create", "batch_v1_api.py", "create_namespaced_job"),
)


def summarize_cprofile(path: Path) -> dict[str, dict[str, float]]:
    """Calls and main-thread CPU (ms per call, s in all) of each CALLS entry."""
    import pstats

    stats = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    out = {}
    for label, suffix, name in CALLS:
        calls, cpu = 0, 0.0
        for (file, _, function), (_, primitive, _, cumulative, _) in stats.items():
            if function == name and file.endswith(suffix):  # a str or a tuple of them
                calls, cpu = calls + primitive, cpu + cumulative
        out[label] = {"calls": calls, "cpu_s": round(cpu, 3), "ms_per_call": 0.0}
        out[label]["ms_per_call"] = round(1000 * cpu / max(calls, 1), 2)
    return out


def machine_cpu_s() -> float:
    """Busy CPU-seconds of the whole machine so far (`/proc/stat`: all but idle and iowait)."""
    ticks = [int(t) for t in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def measure(
    executor: str,
    kubeconfig: str,
    work: Path,
    steps: int,
    args: argparse.Namespace,
    templates: dict[str, Path],
    profile_to: Path,
) -> tuple[RunFigures, dict[str, float]]:
    """One run, and the CPU-seconds around it: the whole machine's over the run (the plane,
    its nodes and the stand-ins as well as the run worker; a quiet machine's), and with
    `--storage postgres` its own PostgreSQL server's (on SQLite the storage runs inside the
    processes)."""
    wrapper, worker_args = _profiler(args.profile, profile_to)
    options = RunOptions(
        concurrency=args.concurrency,
        step_command=(sys.executable, "-S", str(STANDIN)),
        env={"BENCH_STANDIN_EVENTS": str(templates[executor])},
        wrapper=wrapper,
        worker_args=worker_args,
    )
    if args.storage == "sqlite":
        before = machine_cpu_s()
        figures = run_worker(executor, kubeconfig, work, steps, args.step_seconds, options)
        return figures, {"machine_cpu_s": machine_cpu_s() - before}
    with LocalPostgres() as postgres:
        options = replace(options, postgres_url=postgres.url)
        before, storage_before = machine_cpu_s(), postgres.cpu_s()
        figures = run_worker(executor, kubeconfig, work, steps, args.step_seconds, options)
        return figures, {
            "machine_cpu_s": machine_cpu_s() - before,
            "storage_cpu_s": postgres.cpu_s() - storage_before,
        }


def point(figures: RunFigures, around: dict[str, float] | None = None) -> dict[str, Any]:
    """One (N, executor) measurement as JSON (`around`: `measure`'s CPU-seconds around it)."""
    launch = figures.launch_s or [float("nan")]
    return {
        **{key: round(value, 3) for key, value in (around or {}).items()},
        "steps": figures.steps,
        "cpu_s": round(figures.cpu_s, 3),
        "peak_rss_mb": round(figures.peak_rss_mb, 1),
        "wall_s": round(figures.wall_s, 2),
        "requests": figures.requests,
        "requests_detail": figures.detail,
        "launch_p50_s": round(percentile(launch, 50), 3),
        "launch_p99_s": round(percentile(launch, 99), 3),
    }


def slopes(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Marginal cost per added step between consecutive points (sorted by N)."""
    out = []
    for low, high in zip(points, points[1:], strict=False):
        added = high["steps"] - low["steps"]
        per = {
            "cpu_s": (high["cpu_s"] - low["cpu_s"]) / added,
            "peak_rss_mb": (high["peak_rss_mb"] - low["peak_rss_mb"]) / added,
        }
        for key in ("storage_cpu_s", "machine_cpu_s"):
            if key in low and key in high:
                per[key] = (high[key] - low[key]) / added
        for kind in KINDS:
            a, b = low["requests"].get(kind, 0), high["requests"].get(kind, 0)
            per[kind] = (b - a) / added
        out.append({"from": low["steps"], "to": high["steps"], "per_step": per})
    return out


def _ratio(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.2f}" if theirs else ("-" if not ours else "inf")


def report(name: str, results: dict[str, list[dict[str, Any]]]) -> None:
    print(f"{name}:")
    print(
        f"  {'N':>6} {'executor':<12} {'CPU s':>8} {'CPU/step':>9} {'RSS MB':>7} "
        f"{'p50 s':>6} {'p99 s':>6} {'wall s':>7} {'machine':>8}  requests by kind"
    )
    for executor, points in results.items():
        for p in points:
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(p["requests"].items()))
            print(
                f"  {p['steps'] - 1:>6} {executor:<12} {p['cpu_s']:>8.2f} "
                f"{p['cpu_s'] / p['steps']:>9.4f} {p['peak_rss_mb']:>7.1f} "
                f"{p['launch_p50_s']:>6.2f} {p['launch_p99_s']:>6.2f} {p['wall_s']:>7.1f} "
                f"{p.get('machine_cpu_s', float('nan')):>8.1f}  {kinds}"
            )
    ours, theirs = slopes(results.get("ai", [])), slopes(results.get("dagster-k8s", []))
    for a, b in zip(ours, theirs, strict=False):
        print(f"  marginal per added step, N {a['from'] - 1} -> {a['to'] - 1} (ours / dagster-k8s)")
        for key in ("cpu_s", "storage_cpu_s", "machine_cpu_s", "peak_rss_mb", *KINDS):
            if key not in a["per_step"] or key not in b["per_step"]:
                continue
            x, y = a["per_step"][key], b["per_step"][key]
            print(f"    {key:<18} {x:9.4f} / {y:9.4f} = {_ratio(x, y)}")


def bench_target(name: str, kubeconfig: str, work: Path, args: argparse.Namespace) -> dict:
    templates = record_standin_events(work, kubeconfig, work)
    results: dict[str, list[dict[str, Any]]] = {e: [] for e in args.executors}
    for steps in args.steps:
        for executor in args.executors:
            tag = f"{name}-{executor}-{steps}"
            began = time.time()
            figures, around = measure(
                executor, kubeconfig, work, steps, args, templates, args.out / f"profile-{tag}"
            )
            results[executor].append(point(figures, around))
            spy = args.out / f"profile-{tag}.txt"
            if args.profile == "py-spy" and spy.exists():
                shares = summarize_profile(spy)
                results[executor][-1]["profile_percent"] = shares
                print("\n".join(f"    {v:5.1f}%  {k}" for k, v in shares.items()))
            stats = args.out / f"profile-{tag}.pstats"
            if args.profile == "cprofile" and stats.exists():
                calls = summarize_cprofile(stats)
                results[executor][-1]["profile_calls"] = calls
                for label, c in calls.items():
                    print(f"    {label:<26} {c['calls']:>7} calls {c['ms_per_call']:>8.2f} ms")
            heap = args.out / f"profile-{tag}.heap.txt"
            if args.profile == "tracemalloc" and heap.exists():
                print(f"    live heap at its largest: {heap}")
            print(f"  ({tag}: {time.time() - began:.0f} s)", flush=True)
    report(name, results)
    return {
        "target": name,
        "storage": args.storage,
        "concurrency": args.concurrency,
        "step_seconds": args.step_seconds,
        "points": results,
        "marginal": {e: slopes(p) for e, p in results.items()},
    }


def plot(files: Sequence[Path], image: Path) -> None:
    """Run-worker CPU-seconds and launch -> running p99 against N, per target and executor."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, dict[int, dict[str, Any]]] = {}
    for file in files:
        found = json.loads(file.read_text())
        for executor, points in found["points"].items():
            line = series.setdefault(f"{executor} ({found['target']})", {})
            line.update({p["steps"] - 1: p for p in points})
    figure, (cpu, p99) = plt.subplots(1, 2, figsize=(10, 4))
    for label, points in sorted(series.items()):
        steps = sorted(points)
        style = {
            "color": "C0" if label.startswith("ai ") else "C1",
            "linestyle": "-" if "control-plane" in label else "--",
            "marker": "o" if "control-plane" in label else "s",
        }
        cpu.plot(steps, [points[n]["cpu_s"] for n in steps], label=label, **style)
        p99.plot(steps, [points[n]["launch_p99_s"] for n in steps], label=label, **style)
    for axes, title in ((cpu, "run-worker CPU-seconds"), (p99, "launch -> running p99 (s)")):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("steps in the fan-out (N)")
        axes.set_title(title)
        axes.grid(True, which="both", alpha=0.3)
    cpu.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(image, dpi=110)
    print(f"plotted: {image}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ints = lambda s: [int(x) for x in s.split(",")]  # noqa: E731
    parser.add_argument("--targets", default="control-plane,emulator")
    parser.add_argument("--steps", type=ints, default=[100, 1000], help="N, comma-separated")
    parser.add_argument("--concurrency", type=int, default=200, help="max_concurrent of both")
    parser.add_argument("--step-seconds", type=float, default=0.0, help="the stand-in's pause")
    parser.add_argument("--executors", type=lambda s: s.split(","), default=list(EXECUTORS))
    parser.add_argument("--profile", choices=("py-spy", "cprofile", "tracemalloc"), default=None)
    parser.add_argument(
        "--storage",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="the instance's storage: SQLite files, or a PostgreSQL server per run "
        "(Debian's postgresql; needs `pip install -e '.[bench]'`)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts")
    parser.add_argument("--plot", type=Path, help="only plot these results (--plot-from) here")
    parser.add_argument("--plot-from", type=Path, nargs="*", default=[])
    args = parser.parse_args(argv)
    exit_on_sigterm()
    if args.plot:
        plot(args.plot_from, args.plot)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    venv_bin = os.path.dirname(sys.executable)
    os.environ["PATH"] = f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}"
    work = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    for target in args.targets.split(","):
        try:
            if target == "control-plane":
                with control_plane_tenant(work / "cp", NODES) as kubeconfig:
                    found = bench_target("control-plane", kubeconfig, work / "cp", args)
            else:
                with emulator_tenant(work / "emu", NODES) as kubeconfig:
                    found = bench_target("emulator", kubeconfig, work / "emu", args)
        except KubeplaneUnavailable as error:
            print(f"real control plane: skipped ({error})")
            continue
        subset = "" if set(args.executors) == set(EXECUTORS) else "-" + "+".join(args.executors)
        stored = "" if args.storage == "sqlite" else f"-{args.storage}"
        out = args.out / f"bench_scale-{target}{stored}{subset}.json"
        out.write_text(json.dumps({**found, "measured_at": time.time()}, indent=1))
        print(f"  written: {out}")


if __name__ == "__main__":
    main()
