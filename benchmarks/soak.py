"""Soak: SIGKILL the run worker at seeded random moments, resume the run as run monitoring does,
and check that nothing was lost, duplicated or left behind (`make soak`; not part of CI).

Each run is `benchmarks.soak_jobs` (three parallel steps that count their execution in a file
and work for a few seconds), run by a real `dagster api execute_run` process. At a random
moment the run worker is killed with SIGKILL and at once replaced by `dagster api resume_run`
(what a resuming run launcher starts), which may itself be killed again, until the run ends.
Per kill it measures the takeover: from the SIGKILL to the resumed run worker having taken
over every step that was in flight (`ai_executor`: its "Reattached"/"Launching" event;
`k8s_job_executor`: Dagster's "Checking on status of in-progress step" event). After each run
it checks: the run succeeded, every step ran exactly once (its own side effect counted), and
60 s later no step process, pod or Slurm job of the run is left.

Targets: `local` (the embedded backend), `kubernetes` (ai_executor on the emulator) and, for
the ratio, `dagster-k8s` (`k8s_job_executor` on the same plane, resumed the same way);
`slurm` with `--targets slurm` where the local Slurm daemons can start (root). `--plane
control-plane` puts both Kubernetes targets on the real control plane (kube-apiserver, the
scheduler and Job controller, the node agent running the pods, one tenant through the syncer;
built by `make kubeplane`) instead of the emulator.

Example:
    python -m benchmarks.soak --kills 20 --seed 7 --targets local,kubernetes,dagster-k8s
    python -m benchmarks.soak --kills 20 --seed 7 --targets kubernetes,dagster-k8s \
        --plane control-plane
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dagster import DagsterInstance, DagsterRunStatus
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.events import DagsterEventType
from dagster._grpc.types import ExecuteRunArgs, ResumeRunArgs
from dagster_shared.serdes import serialize_value

from benchmarks.k8s_runs import (
    NAMESPACE,
    byte_compiled,
    control_plane_tenant,
    dagster_home,
    emulator_tenant,
    executor_config,
    exit_on_sigterm,
    percentile,
)
from benchmarks.soak_jobs import STEPS

ROOT = Path(__file__).parents[1]
REPO = ReconstructableRepository.for_module(
    "benchmarks.soak_jobs", "defs", working_directory=str(ROOT)
)
TAKEOVER = {
    "ai": ("Reattached to step", "Launching step", "Warning: attempt"),
    "k8s": ("Checking on status of in-progress step",),
}


@dataclass
class Figures:
    kills: int = 0
    runs: int = 0
    failed_runs: int = 0
    duplicated: int = 0  # step executions beyond one per step
    left_behind: int = 0
    takeovers_s: list[float] = field(default_factory=list)

    def line(self, name: str) -> str:
        takeover = self.takeovers_s
        p50 = percentile(takeover, 50) if takeover else float("nan")
        p95 = percentile(takeover, 95) if takeover else float("nan")
        return (
            f"{name:12} kills {self.kills:3}  runs {self.runs:3}  failed {self.failed_runs}  "
            f"duplicated {self.duplicated}  left {self.left_behind}  "
            f"takeover p50 {p50:.2f}s p95 {p95:.2f}s"
        )


@dataclass(frozen=True)
class Target:
    name: str
    executor: str  # "ai" | "k8s"
    config: dict[str, Any]
    leftovers: Any  # run_id -> count of step processes / pods / jobs still alive


def soak(target: Target, kills: int, rng: random.Random, work: Path) -> Figures:
    figures = Figures()
    while figures.kills < kills:
        folder = Path(tempfile.mkdtemp(prefix="run-", dir=work))
        figures.runs += 1
        run_id, status = one_run(target, folder, rng, figures, kills)
        done = folder / "executions"
        executions = done.read_text().splitlines() if done.exists() else []
        if status != DagsterRunStatus.SUCCESS:
            print(f"run {run_id} ended {status.value}: {_last_error(run_id)}", flush=True)
        figures.duplicated += max(0, len(executions) - STEPS)
        figures.failed_runs += status != DagsterRunStatus.SUCCESS
        deadline = time.monotonic() + 60
        while target.leftovers(run_id) and time.monotonic() < deadline:
            time.sleep(1)
        figures.left_behind += target.leftovers(run_id)
        print(figures.line(target.name), flush=True)
    return figures


def one_run(
    target: Target, folder: Path, rng: random.Random, figures: Figures, kills: int
) -> tuple[str, DagsterRunStatus]:
    recon = REPO.get_reconstructable_job(f"soak_{target.executor}")
    seconds = {f"soak_{i}": {"config": {"dir": str(folder), "seconds": rng.uniform(3, 8)}}
               for i in range(STEPS)}  # fmt: skip
    with DagsterInstance.get() as instance:
        run = instance.create_run_for_job(
            job_def=recon.get_definition(),
            run_config={"execution": {"config": target.config}, "ops": seconds},
            job_code_origin=recon.get_python_origin(),
        )
        origin, ref = recon.get_python_origin(), instance.get_ref()
        process = _start("execute_run", ExecuteRunArgs(origin, run.run_id, ref))
        # a run worker lost before the run started is run monitoring's start timeout, not a
        # resume: kills come once the run is STARTED
        while _status(instance, run.run_id) != DagsterRunStatus.STARTED:
            time.sleep(0.05)
        while True:
            wait_s = rng.uniform(0.5, 8.0)
            try:
                process.wait(wait_s)
                break  # the run ended before this kill
            except subprocess.TimeoutExpired:
                pass
            if figures.kills >= kills:
                process.wait(600)
                break
            in_flight = _in_flight(instance, run.run_id)
            process.send_signal(signal.SIGKILL)
            process.wait()
            killed_at, figures.kills = time.time(), figures.kills + 1
            process = _start("resume_run", ResumeRunArgs(origin, run.run_id, ref))
            took = _takeover(instance, run.run_id, in_flight, killed_at, target.executor)
            if took is not None:
                figures.takeovers_s.append(took)
        return run.run_id, _status(instance, run.run_id)


def _status(instance: DagsterInstance, run_id: str) -> DagsterRunStatus:
    found = instance.get_run_by_id(run_id)
    assert found is not None
    return found.status


def _last_error(run_id: str) -> str:
    with DagsterInstance.get() as instance:
        records = instance.all_logs(run_id)
    messages = [r.dagster_event.message or "" for r in records if r.dagster_event]
    errors = [
        r.dagster_event.engine_event_data.error.to_string()
        for r in records
        if r.dagster_event
        and r.dagster_event.is_engine_event
        and r.dagster_event.engine_event_data.error
    ]
    return " | ".join(m[:300] for m in messages[-3:]) + (
        "\n" + errors[-1][-1500:] if errors else ""
    )


def _start(command: str, args: Any) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "dagster", "api", command, serialize_value(args)]
    return subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _in_flight(instance: DagsterInstance, run_id: str) -> set[str]:
    """Steps started and not ended, from the run's events."""
    started: set[str] = set()
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type is DagsterEventType.STEP_START:
            started.add(event.step_key)
        elif event.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
            started.discard(event.step_key)
    return started


def _takeover(
    instance: DagsterInstance, run_id: str, steps: set[str], since: float, executor: str
) -> float | None:
    """Seconds from `since` until every step of `steps` was taken over by the new run worker
    or had ended meanwhile (≤ 60 s); None when none needed taking over."""
    deadline = time.monotonic() + 60
    ended = (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE)
    while steps and time.monotonic() < deadline:
        taken: dict[str, float] = {}
        done: set[str] = set()
        for record in instance.all_logs(run_id):
            event = record.dagster_event
            if event is None or event.step_key not in steps:
                continue
            if event.event_type in ended:
                done.add(event.step_key)
            elif record.timestamp >= since and (event.message or "").startswith(TAKEOVER[executor]):
                taken.setdefault(event.step_key, record.timestamp)
        if steps <= taken.keys() | done:
            return max(taken.values()) - since if taken else None
        time.sleep(0.1)
    return None


@contextmanager
def targets(names: list[str], work: Path, plane: str = "emulator") -> Iterator[list[Target]]:
    with ExitStack() as stack:
        built: list[Target] = []
        kubeconfig = None
        if {"kubernetes", "dagster-k8s"} & set(names):
            tenant = control_plane_tenant if plane == "control-plane" else emulator_tenant
            kubeconfig = stack.enter_context(tenant(work / plane))
            os.environ["DAGSTER_HOME"] = str(dagster_home(work, kubeconfig))
        else:
            home = Path(tempfile.mkdtemp(prefix="home-", dir=work))
            (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
            os.environ["DAGSTER_HOME"] = str(home)
        step = [sys.executable, "-m", "dagster"]
        for name in names:
            if name == "local":
                built.append(Target(name, "ai", {"backend": "local"}, _local_left))
            elif name in ("kubernetes", "dagster-k8s"):
                assert kubeconfig is not None
                executor = "ai" if name == "kubernetes" else "k8s"
                # dagster-k8s's pods run `dagster api execute_step`: this interpreter's CLI
                bin_dir = str(Path(sys.executable).parent)
                os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
                config = executor_config(
                    executor, kubeconfig, STEPS, step if executor == "ai" else ()
                )
                built.append(Target(name, executor, config, _pods_left(kubeconfig)))
            elif name == "slurm":
                from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster

                cluster = stack.enter_context(LocalSlurmCluster())
                slurm = {"workdir": str(cluster.workdir), "slurm_conf": str(cluster.conf_path)}
                config = {"backend": "slurm", "slurm": slurm}
                built.append(Target(name, "ai", config, _slurm_left(cluster)))
            else:
                raise SystemExit(f"unknown target {name!r}")
        yield built


def _local_left(run_id: str) -> int:
    from k8s_ai_orchestrator.backends.local.ledger import AdmissionLedger

    return sum(1 for c in AdmissionLedger().snapshot().claims if c.run_id == run_id)


def _pods_left(kubeconfig: str) -> Any:
    from kubernetes import client, config

    def left(run_id: str) -> int:
        with config.new_client_from_config(config_file=kubeconfig) as api:
            pods = client.CoreV1Api(api).list_namespaced_pod(NAMESPACE).items
        live = [p for p in pods if p.status.phase in ("Pending", "Running")]
        return sum(1 for p in live if run_id in json.dumps(p.metadata.labels or {}))

    return left


def _slurm_left(cluster: Any) -> Any:
    def left(run_id: str) -> int:
        done = cluster.run(["squeue", "--noheader", "--format=%k"])
        return sum(1 for line in done.stdout.splitlines() if run_id in line)

    return left


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="SIGKILLs per target")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--targets", default="local,kubernetes,dagster-k8s")
    parser.add_argument(
        "--plane",
        choices=("emulator", "control-plane"),
        default="emulator",
        help="where the Kubernetes targets run",
    )
    args = parser.parse_args()
    exit_on_sigterm()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    byte_compiled()
    print(f"soak: seed {seed}, {args.kills} kills per target, plane {args.plane}", flush=True)
    results: dict[str, Figures] = {}
    with (
        tempfile.TemporaryDirectory(prefix="k8sai-soak-") as tmp,
        targets(args.targets.split(","), Path(tmp), args.plane) as built,
    ):
        for target in built:
            results[target.name] = soak(target, args.kills, random.Random(seed), Path(tmp))
    print()
    for name, figures in results.items():
        print(figures.line(name))
    if "kubernetes" in results and "dagster-k8s" in results:
        mine = statistics.median(results["kubernetes"].takeovers_s or [float("nan")])
        theirs = statistics.median(results["dagster-k8s"].takeovers_s or [float("nan")])
        plane = "the real control plane" if args.plane == "control-plane" else "the emulator"
        print(f"takeover p50, ai_executor / k8s_job_executor on {plane}: {mine / theirs:.2f}x")
    gated = [n for n in results if n != "dagster-k8s"]  # the baseline's failures are reported
    bad = [
        n
        for n in gated
        if results[n].failed_runs or results[n].duplicated or results[n].left_behind
    ]
    if bad:
        raise SystemExit(f"soak failed for {', '.join(bad)}")


if __name__ == "__main__":
    main()
