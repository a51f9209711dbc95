"""A GPU pool shared by training gangs and preemptible steps, on the real control plane.

The pool: 2 nodes × 4 (fake) GPUs, one vCluster-style tenant, the node agent, v1.37.2.

The trace (fixed): over 90 s, two training gangs arrive, at 10 s and at 52 s; each is 2 pods
× 2 GPUs (half the pool, one pod per node) doing 12 s of work, which with its ranks' start-up
holds the GPUs about 18 s, so gangs hold half the pool about 40% of the time (printed).
Preemptible steps (1 GPU each, `preemptible=True`, the low PriorityClass) are always
queued: each works 20 units of 1 s, checkpoints every 3 units and, on SIGTERM (a
preemption), saves what it finished and exits; a preempted step is resubmitted as its next
attempt and resumes from its checkpoint.

Scheduled two ways through `KubernetesBackend`:
- (a) shared: 12 preemptible steps always submitted (the scheduler queues what does not fit);
  a gang preempts what it needs (real kube-scheduler preemption);
- (b) split, as fixed pools are run today: 2 GPUs of each node reserved for training (idle
  between gangs); preemptible steps pinned to the other 2 GPUs of each node.

Prints GPU utilisation (GPU-seconds busy / available), units redone after preemptions (per
preemption), and each gang's start delay (arrival → every pod Running), with the targets:
utilisation (a) ≥ 1.3 × (b); gang delay (a) ≤ (b) + the grace period + 2 s; units redone ≤
one checkpoint interval per preemption. Then a 2-node gang's launch → all ranks running on
Kubernetes (every pod Running) vs on the local Slurm (both `srun` ranks started), on the
same machine, idle.

With `--kueue`, the shared pool is scheduled a third way, (c): through a real Kueue v0.17
(`scripts/build-kueue.sh`) on the tenant, with the tenant chart's ClusterQueue holding the
pool's 8 GPUs (`gang_admission.mode: kueue`): Kueue admits each gang whole and evicts
preemptible steps for it by quota, before any of its pods exists.

Run: `python -m benchmarks.bench_gpu_pool [--kueue]` (the control plane from
`scripts/build-kubeplane.sh`; the Slurm part needs root and the Slurm packages, and is skipped
with a note without them).
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes.client import SchedulingV1Api

from k8s_ai_orchestrator.backends.base import FailureReason, JobHandle, LaunchRequest, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.spec import ComputeSpec, MiB
from k8s_ai_orchestrator.stepenv import step_env
from k8s_ai_orchestrator.testing.controlplane import build_kubeplane, start_control_plane
from k8s_ai_orchestrator.testing.controlplane.kube import RealKube
from k8s_ai_orchestrator.testing.kube import NodeSpec

ROOT = Path(__file__).resolve().parents[1]
TENANT, NAMESPACE = "team-a", "default"
NODES = [NodeSpec(name=f"gpu-{n}", cpu="16", memory="32Gi", gpus=4) for n in "ab"]
POOL_GPUS = 8
TRACE_S = 90.0
GANGS = ((10.0, 12.0), (52.0, 12.0))  # (arrival s, seconds of work: ~18 s held with start-up)
GANG_GPUS_PER_NODE = 2
UNITS, UNIT_S, CHECKPOINT_EVERY = 20, 1.0, 3
SHARED_IN_FLIGHT = 12  # preemptible steps submitted at once in (a): 8 run, 4 queue
RESERVED_PER_NODE = 2  # (b): GPUs per node kept for training
GRACE_S = 3.0
POLL_S = 0.25
STEP = """
import os, signal, sys, time
ckpt, log, units, unit_s, every = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:6])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
done = int(open(ckpt).read()) if os.path.exists(ckpt) else 0

def save(n):
    with open(ckpt + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(ckpt + ".tmp", ckpt)

while done < units:
    end = time.monotonic() + unit_s
    while time.monotonic() < end and not stop:
        time.sleep(0.05)
    if stop:
        save(done)  # what it finished; the unit in flight is lost
        sys.exit(143)
    with open(log, "a") as f:
        f.write(f"{done}\\n")
    done += 1
    if done % every == 0 or done == units:
        save(done)
"""


@dataclass
class Span:
    """One attempt's time on GPUs."""

    gpus: int
    start: float | None = None
    end: float | None = None


@dataclass
class Figures:
    """What one schedule measured."""

    busy_gpu_s: float = 0.0
    preemptions: int = 0
    units_done: int = 0
    units_redone: int = 0
    gang_delays: list[float] = field(default_factory=list)
    gang_held_s: float = 0.0  # seconds some gang held its GPUs (Running → finished)
    steps_finished: int = 0

    @property
    def utilisation(self) -> float:
        return self.busy_gpu_s / (POOL_GPUS * TRACE_S)


@contextmanager
def gpu_pool(work: Path) -> Iterator[tuple[RealKube, str]]:
    """The real control plane with the two GPU nodes and one tenant; yields its kubeconfig."""
    bin_dir = build_kubeplane(ROOT / "scripts" / "build-kubeplane.sh", check_only=True)
    with start_control_plane(bin_dir, work / "plane", tenants=[TENANT]) as plane:
        with RealKube(plane, NODES, work / "nodes") as kube:
            from kubernetes.client import CoreV1Api

            tenant_core = CoreV1Api(kube.tenant(TENANT).api_client())
            kube.wait_for(lambda: len(tenant_core.list_node().items) == len(NODES), 60)
            scheduling = SchedulingV1Api(kube.tenant(TENANT).api_client())
            for name, value in (("k8s-ai-standard", 100000), ("k8s-ai-preemptible", 1000)):
                body = {"metadata": {"name": name}, "value": value}
                if name == "k8s-ai-preemptible":
                    body["preemptionPolicy"] = "Never"
                scheduling.create_priority_class(body)
            yield kube, kube.tenant(TENANT).kubeconfig_path


@contextmanager
def kueue_on(kube: RealKube, work: Path) -> Iterator[str]:
    """Kueue on the tenant, with the tenant chart's ClusterQueue (the whole pool) and LocalQueue;
    yields the LocalQueue's name."""
    import helm_python as helm

    from k8s_ai_orchestrator.testing.controlplane.binary import build_kueue
    from k8s_ai_orchestrator.testing.controlplane.kueue import start_kueue

    bin_dir = build_kueue(ROOT / "scripts" / "build-kueue.sh", check_only=True)
    with start_kueue(bin_dir, kube.plane.tenants[TENANT], work / "kueue"):
        values = {
            "tenant": TENANT,
            "namespace": {"create": False, "name": NAMESPACE},
            "priorityClasses": {"create": False},
            "quota": {"enabled": False},
            "limitRange": {"enabled": False},
            "kueue": {
                "enabled": True,
                "quota": {"cpu": "32", "memory": "64Gi", "nvidia.com/gpu": str(POOL_GPUS)},
            },
        }
        kubeconfig = str(kube.tenant(TENANT).kubeconfig_path)
        chart = ROOT / "helm" / "k8s-ai-tenant"
        helm.Config(kubeconfig_path=kubeconfig, namespace=NAMESPACE).install(
            chart, "k8s-ai", values, timeout=120
        )
        yield "k8s-ai"


def backend_for(kubeconfig: str, work: Path, local_queue: str | None = None) -> KubernetesBackend:
    tenant: dict[str, Any] = {"kubeconfig": kubeconfig, "namespace": NAMESPACE}
    if local_queue is not None:
        tenant["gang_admission"] = {"mode": "kueue", "local_queue": local_queue}
    config = {
        "image": "ghcr.io/acme/bench:1",
        "python": sys.executable,
        "gang_workdir": str(work / "gangs"),
        "gpu_tolerations": [],
        "pending_events_interval_s": 1.0,
        "tenants": {TENANT: tenant},
    }
    return KubernetesBackend(KubernetesConfig.from_dict(config), default_tenant=TENANT)


def preemptible_request(run: str, step: int, attempt: int, work: Path, node: str | None) -> Any:
    spec = ComputeSpec(cpu=0.25, memory_bytes=128 * MiB, gpu=1, preemptible=True)
    ckpt, log = work / f"step-{step}.ckpt", work / f"step-{step}.log"
    argv = [sys.executable, "-c", STEP, str(ckpt), str(log), str(UNITS), str(UNIT_S)]
    argv.append(str(CHECKPOINT_EVERY))
    labels = {}
    if node is not None:
        pinned = {"pod_spec_config": {"node_selector": {"kubernetes.io/hostname": node}}}
        labels["dagster-k8s/config"] = json.dumps(pinned)
    return LaunchRequest(
        run,
        f"p{step}",
        attempt,
        argv,
        {},
        spec,
        grace_period_s=GRACE_S,
        labels=labels,
        raw_command=True,
    )


def gang_request(run: str, index: int, seconds: float) -> LaunchRequest:
    spec = ComputeSpec(cpu=0.5, memory_bytes=512 * MiB, nodes=2, gpu=GANG_GPUS_PER_NODE)
    code = (
        "import time\nfrom k8s_ai_orchestrator.gang import Gang\n"
        f"Gang(straggler_timeout_s=60).run(time.sleep, {seconds})\n"
    )
    key = f"train{index}"
    env = step_env(
        backend="kubernetes", run_id=run, step_key=key, attempt=0, spec=spec, grace_s=GRACE_S
    )
    env["PYTHONPATH"] = str(ROOT)
    return LaunchRequest(
        run, key, 0, [sys.executable, "-c", code], env, spec, grace_period_s=GRACE_S
    )


def schedule(
    kube: RealKube, kubeconfig: str, work: Path, shared: bool, local_queue: str | None = None
) -> Figures:
    """Run the trace once; (a) shared when `shared`, else (b) split; (c) shared through
    Kueue with `local_queue`."""
    work.mkdir(parents=True)
    (work / "gangs").mkdir()
    backend = backend_for(kubeconfig, work, local_queue)
    run = uuid.uuid4().hex[:8]
    figures = Figures()
    spans: dict[str, Span] = {}
    steps: dict[str, tuple[int, int, str | None]] = {}  # job → (step, attempt, node)
    queue: list[tuple[int, int]] = []  # (step, attempt) to submit; resumed ones first
    next_step = 0
    gangs: dict[str, tuple[int, float]] = {}  # job → (gang index, arrival)
    arrived = 0
    start = time.monotonic()

    def now() -> float:
        return time.monotonic() - start

    def pinned_counts() -> dict[str, int]:
        counts = {n.name: 0 for n in NODES}
        for _, _, node in steps.values():
            if node is not None:
                counts[node] += 1
        return counts

    def submit_preemptible(step: int, attempt: int) -> bool:
        node = None
        if not shared:
            free = [n for n, c in pinned_counts().items() if c < 4 - RESERVED_PER_NODE]
            if not free:
                return False
            node = free[0]
        elif len(steps) >= SHARED_IN_FLIGHT:
            return False
        handle = backend.submit(preemptible_request(run, step, attempt, work, node))
        steps[handle.job_id] = (step, attempt, node)
        handles[handle.job_id] = handle
        spans[handle.job_id] = Span(1)
        return True

    handles: dict[str, JobHandle] = {}
    while now() < TRACE_S:
        while arrived < len(GANGS) and now() >= GANGS[arrived][0]:
            handle = backend.submit(gang_request(run, arrived, GANGS[arrived][1]))
            handles[handle.job_id] = handle
            gangs[handle.job_id] = (arrived, now())
            spans[handle.job_id] = Span(2 * GANG_GPUS_PER_NODE)
            arrived += 1
        for job, handle in list(handles.items()):
            span = spans[job]
            if span.end is not None:
                continue
            status = backend.status(handle)
            if status.state == StepState.RUNNING and span.start is None:
                span.start = now()
                if job in gangs:
                    figures.gang_delays.append(span.start - gangs[job][1])
            if status.is_terminal:
                span.end = now()
                if span.start is None:
                    span.start = span.end
                if job in steps:
                    step, attempt, _ = steps.pop(job)
                    if status.reason in (FailureReason.PREEMPTED, FailureReason.EVICTED):
                        figures.preemptions += 1
                        queue.insert(0, (step, attempt + 1))
                    elif status.state == StepState.SUCCEEDED:
                        figures.steps_finished += 1
        while True:
            if queue:
                step, attempt = queue[0]
            else:
                step, attempt = next_step, 0
            if not submit_preemptible(step, attempt):
                break
            if queue:
                queue.pop(0)
            else:
                next_step += 1
        time.sleep(POLL_S)
    end = now()
    for job, handle in handles.items():
        if spans[job].end is None:
            spans[job].end = end
            if spans[job].start is None:
                spans[job].start = end
        backend.cancel(handle)
    figures.gang_held_s = sum(
        min(spans[j].end or end, TRACE_S) - min(spans[j].start or end, TRACE_S) for j in gangs
    )
    figures.busy_gpu_s = sum(
        s.gpus * (min(s.end or end, TRACE_S) - min(s.start or end, TRACE_S)) for s in spans.values()
    )
    for log in work.glob("step-*.log"):
        units = log.read_text().split()
        figures.units_done += len(units)
        figures.units_redone += len(units) - len(set(units))
    backend.close()
    kube.wait_for(lambda: kube.processes_alive() == 0, 120)
    kube.wait_for(lambda: not _live_pods(kube), 120)  # finished Jobs stay until their TTL
    return figures


def _live_pods(kube: RealKube) -> list[Any]:
    phases = ("Succeeded", "Failed")
    return [
        p
        for p in kube.pods(TENANT, NAMESPACE)
        if (p.get("status") or {}).get("phase") not in phases
    ]


def k8s_gang_launch(kube: RealKube, kubeconfig: str, work: Path, rounds: int) -> list[float]:
    """Submit → every pod Running for a 2-node gang on the idle pool."""
    work.mkdir(parents=True)
    (work / "gangs").mkdir()
    backend = backend_for(kubeconfig, work)
    times = []
    for index in range(rounds):
        handle = backend.submit(gang_request(uuid.uuid4().hex[:8], index, 30))
        began = time.perf_counter()
        while backend.status(handle).state != StepState.RUNNING:
            time.sleep(0.02)
        times.append(time.perf_counter() - began)
        backend.cancel(handle)
        kube.wait_for(lambda: kube.processes_alive() == 0, 120)
    backend.close()
    return times


def slurm_gang_launch(rounds: int) -> list[float] | str:
    """Submit → both `srun` ranks started for a 2-node gang on the local Slurm."""
    from k8s_ai_orchestrator.backends.slurm import SlurmBackend, SlurmConfig
    from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster, missing_slurm_programs

    from .bench_slurm_dispatch import _ours, _raw

    missing = missing_slurm_programs()
    if missing:
        return f"skipped: Slurm programs missing ({', '.join(missing)})"
    with LocalSlurmCluster(rest=False) as cluster:
        config = SlurmConfig(workdir=str(cluster.workdir), slurm_conf=str(cluster.conf_path))
        backend = SlurmBackend(config)
        backend.limits()
        warm_up = cluster.workdir / "warm-up"
        warm_up.mkdir()
        _raw(cluster, warm_up)
        cluster.wait_until_idle(60)
        times = []
        for index in range(rounds):
            markers = cluster.workdir / f"gang-{index}"
            markers.mkdir()
            elapsed, _ = _ours(backend, markers)
            times.append(elapsed)
            cluster.wait_until_idle(60)
    return times


def _report(shared: Figures, split: Figures, kueue: Figures | None = None) -> None:
    held = split.gang_held_s / TRACE_S
    print(f"GPU pool 2 nodes x 4 GPUs, {TRACE_S:.0f} s trace: gangs of 2 pods x 2 GPUs at")
    print(f"{', '.join(f'{a:.0f} s' for a, _ in GANGS)}, {GANGS[0][1]:.0f} s of work each, holding")
    print(f"half the pool {held:.0%} of the time in (b);")
    print(f"preemptible 1-GPU steps of {UNITS} x {UNIT_S:.0f} s units, checkpoint every")
    print(f"{CHECKPOINT_EVERY} units, always queued")
    rows = [("(a) shared pool", shared), ("(b) split pool", split)]
    rows += [("(c) shared, Kueue", kueue)] if kueue is not None else []
    for label, f in rows:
        per = f.units_redone / f.preemptions if f.preemptions else 0.0
        delays = ", ".join(f"{d:.1f}" for d in f.gang_delays)
        print(
            f"  {label:<17} utilisation {f.utilisation:.2f}  preemptions {f.preemptions:2d}  "
            f"units redone {f.units_redone} ({per:.1f}/preemption)  units done {f.units_done}  "
            f"gang start delay s [{delays}]"
        )
    ratio = shared.utilisation / split.utilisation
    print(f"  utilisation (a) / (b): {ratio:.2f} (target >= 1.3)")
    worst = max(a - b for a, b in zip(shared.gang_delays, split.gang_delays, strict=False))
    print(
        f"  gang start delay (a) - (b), worst: {worst:+.1f} s (target <= grace "
        f"{GRACE_S:.0f} s + 2 s)"
    )
    per = shared.units_redone / shared.preemptions if shared.preemptions else 0.0
    print(f"  units redone per preemption (a): {per:.1f} (target <= {CHECKPOINT_EVERY})")
    if kueue is not None:
        worst = max(a - b for a, b in zip(kueue.gang_delays, split.gang_delays, strict=False))
        per = kueue.units_redone / kueue.preemptions if kueue.preemptions else 0.0
        print(
            f"  (c) Kueue: utilisation (c) / (b) {kueue.utilisation / split.utilisation:.2f}, "
            f"gang start delay (c) - (b) worst {worst:+.1f} s, units redone per preemption "
            f"{per:.1f}"
        )


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        with gpu_pool(work) as (kube, kubeconfig):
            shared = schedule(kube, kubeconfig, work / "shared", shared=True)
            split = schedule(kube, kubeconfig, work / "split", shared=False)
            k8s = k8s_gang_launch(kube, kubeconfig, work / "launch", 3)
            kueue = None
            if "--kueue" in sys.argv[1:]:
                with kueue_on(kube, work) as local_queue:
                    kueue = schedule(kube, kubeconfig, work / "kueue-shared", True, local_queue)
            _report(shared, split, kueue)
        slurm = slurm_gang_launch(3)
    print("2-node gang launch -> all ranks running, idle, median of 3")
    shown = [round(t, 2) for t in k8s]
    print(f"  Kubernetes (every pod Running): {statistics.median(k8s):.2f} s {shown}")
    if isinstance(slurm, str):
        print(f"  local Slurm: {slurm}")
    else:
        median, shown = statistics.median(slurm), [round(t, 2) for t in slurm]
        print(f"  local Slurm (both srun ranks started): {median:.2f} s {shown}")
        print(f"  Kubernetes / Slurm: {statistics.median(k8s) / median:.2f}")


if __name__ == "__main__":
    main()
