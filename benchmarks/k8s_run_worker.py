"""One Dagster run worker for `bench_k8s_executors` and `bench_scale`: N ops through one executor.

Run as a child process so its CPU time is its own:
`python -m benchmarks.k8s_run_worker --executor ai|dagster-k8s --config CONFIG.json --out OUT`.
It runs the job as a launched run's worker does (`dagster api execute_run`: the run is
created, then `execute_run_iterator` is consumed without keeping its events).

It counts every Kubernetes API request this process sends (the official client's REST layer),
by kind: create/delete, log streams, status reads (GET, LIST and each WATCH stream of pods,
Jobs and events), pre-flight checks (any other GET: secrets, quotas, nodes; access reviews)
and other;
it records when each step's Job was created; the ops record when they started and ended. All
of it goes to OUT as JSON. `--cprofile STATS` profiles the run (the main thread: the
executor's loop) with cProfile, timed by the thread's CPU clock. `--tracemalloc TEXT` traces
the run's allocations and writes, near the moment the traced heap was largest (`HeapPeak`),
the biggest live allocations by call site and by the package frame that made them.
"""

import argparse
import cProfile
import json
import os
import threading
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

from dagster import (
    DagsterInstance,
    DagsterRunStatus,
    Definitions,
    In,
    Nothing,
    OpExecutionContext,
    job,
    op,
)
from dagster._core.definitions.reconstruct import ReconstructableRepository
from dagster._core.execution.api import execute_run_iterator
from dagster_k8s import k8s_job_executor
from kubernetes.client import rest

from k8s_ai_orchestrator import ai_executor

STEPS = int(os.environ.get("BENCH_STEPS", "4"))
STEP_SECONDS = float(os.environ.get("BENCH_STEP_SECONDS", "2"))
MARKS = os.environ.get("BENCH_MARKS", "")


@op
def sleeper(context: OpExecutionContext) -> None:
    """Sleeps BENCH_STEP_SECONDS; writes its start and end times under BENCH_MARKS."""
    started = time.time()
    time.sleep(STEP_SECONDS)
    mark = Path(MARKS) / f"{context.op_handle.name}.json"
    mark.write_text(json.dumps({"started": started, "ended": time.time()}))


@op(ins={"after": In(Nothing)})
def gather() -> None:
    """Waits for the fan-out."""


def _fan_out(name: str, executor: Any) -> Any:
    @job(name=name, executor_def=executor)
    def fan_out() -> None:
        gather(after=[sleeper.alias(f"step_{i}")() for i in range(STEPS)])

    return fan_out


defs = Definitions(
    jobs=[_fan_out("fan_out_ai", ai_executor), _fan_out("fan_out_dagster_k8s", k8s_job_executor)]
)


# Reads of what a step's Job is doing; any other GET (the tenant's kubeconfig secret, its
# ResourceQuotas, nodes, PriorityClasses) and the permission reviews check the cluster
# before a submit ("pre-flight checks").
STATUS_RESOURCES = ("pods", "jobs", "events")


def resource_of(path: str) -> str:
    """`pods`, `pods/log`, `jobs`, `secrets`... from an API path.

    Example:
        >>> resource_of("/api/v1/namespaces/default/pods/step-0/log")
        'pods/log'
        >>> resource_of("/apis/batch/v1/namespaces/default/jobs")
        'jobs'
    """
    parts = [p for p in path.split("/") if p]
    parts = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if parts[:1] == ["namespaces"] and len(parts) > 2:
        parts = parts[2:]
    return parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "") if parts else "/"


class RequestCounter:
    """Counts this process's Kubernetes API requests; records Job creation times."""

    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.detail: Counter[str] = Counter()  # "GET pods", "POST jobs", ...
        self.created: dict[str, float] = {}  # step key → when its Job was created
        self._lock = threading.Lock()
        self._request = rest.RESTClientObject.request

    def install(self) -> None:
        counter = self
        original = self._request

        def request(client: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            counter.count(method, url, kwargs.get("query_params"))
            answer = original(client, method, url, *args, **kwargs)
            if method == "POST" and url.rstrip("/").endswith("/jobs"):
                counter.job_created(kwargs.get("body"))
            return answer

        rest.RESTClientObject.request = request  # type: ignore[method-assign]

    def count(self, method: str, url: str, query: Any) -> None:
        resource = resource_of(urllib.parse.urlsplit(url).path)
        if resource.endswith("accessreviews"):  # a permission check: POST, but creates nothing
            kind = "pre-flight checks"
        elif method in ("POST", "DELETE"):
            kind = "create/delete"
        elif resource == "pods/log":
            kind = "log streams"
        elif method == "GET" and resource.split("/")[0] in STATUS_RESOURCES:
            kind = "status reads"
        elif method == "GET":
            kind = "pre-flight checks"
        else:
            kind = "other"
        with self._lock:
            self.kinds[kind] += 1
            self.detail[f"{method} {resource}"] += 1

    def job_created(self, body: Any) -> None:
        meta = body.get("metadata") if isinstance(body, dict) else getattr(body, "metadata", None)
        if meta is None:
            return
        labels = (meta.get("labels") if isinstance(meta, dict) else meta.labels) or {}
        notes = (meta.get("annotations") if isinstance(meta, dict) else meta.annotations) or {}
        step = notes.get("k8s-ai/step-key") or labels.get("dagster/op")
        if step:
            with self._lock:
                self.created[str(step)] = time.time()


class HeapPeak:
    """Trace allocations; keep a snapshot of the largest traced heap seen (looked at every 30 s,
    taken again only when the heap grew by a quarter: a snapshot holds the GIL for seconds) and
    write its top allocations, by line and by the innermost frame of the package or Dagster."""

    FRAMES = 8

    def __init__(self, out: Path, interval_s: float = 30.0) -> None:
        import tracemalloc

        self._out, self._interval_s = out, interval_s
        self._tm = tracemalloc
        tracemalloc.start(self.FRAMES)
        self._best: Any = None
        self._best_size = 0
        self._samples = 0
        self._first: Any = None  # a sample early in the run, and the newest: what grew between
        self._last: Any = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(self._interval_s):
            self._take()

    def _take(self) -> None:
        size, _ = self._tm.get_traced_memory()
        if size > 1.25 * self._best_size:
            self._best, self._best_size = self._tm.take_snapshot(), size
        self._samples += 1
        if self._samples in (2, 3) or self._samples % 4 == 0:  # sparing: each holds the GIL
            now = self._tm.take_snapshot()
            self._first = self._first or now  # the first after the run got going
            self._last = now

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._take()
        self._tm.stop()
        snapshot = self._best
        lines = [f"largest traced heap: {self._best_size / 2**20:.1f} MiB", "", "by line:"]
        for stat in snapshot.statistics("lineno")[:30]:
            lines.append(f"  {stat.size / 2**20:8.2f} MiB {stat.count:>8}  {stat.traceback[0]}")
        owners: Counter[str] = Counter()
        counts: Counter[str] = Counter()
        for trace in snapshot.traces:
            frame = next(
                (
                    f
                    for f in reversed(trace.traceback)  # oldest first: innermost is last
                    if "k8s_ai_orchestrator" in f.filename or "/dagster" in f.filename
                ),
                trace.traceback[0],
            )
            owners[f"{frame.filename}:{frame.lineno}"] += trace.size
            counts[f"{frame.filename}:{frame.lineno}"] += 1
        lines += ["", "by the innermost package or Dagster frame:"]
        for where, size in owners.most_common(40):
            lines.append(f"  {size / 2**20:8.2f} MiB {counts[where]:>8}  {where}")
        if self._first is not None and self._last is not self._first:
            lines += ["", "grew between an early sample and the last (what a run keeps):"]
            for diff in self._last.compare_to(self._first, "traceback")[:25]:
                inner = list(reversed(diff.traceback))
                frames = [f for f in inner if "/k8s_ai_orchestrator/" in f.filename]
                where = " < ".join(str(f) for f in (frames or inner)[:3])
                lines.append(f"  {diff.size_diff / 2**20:+8.2f} MiB {diff.count_diff:>+8}  {where}")
        self._out.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=("ai", "dagster-k8s"), required=True)
    parser.add_argument("--config", type=Path, required=True, help="executor config (JSON)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--cprofile", type=Path, help="write the run's cProfile stats here")
    parser.add_argument("--tracemalloc", type=Path, help="write the live heap at its peak here")
    args = parser.parse_args()
    counter = RequestCounter()
    counter.install()
    repo = ReconstructableRepository.for_module(
        "benchmarks.k8s_run_worker", "defs", working_directory=os.getcwd()
    )
    name = "fan_out_ai" if args.executor == "ai" else "fan_out_dagster_k8s"
    config = json.loads(args.config.read_text())
    # The main thread's CPU time, not wall time: what each call cost the run worker.
    profile = cProfile.Profile(time.thread_time) if args.cprofile else None
    heap = HeapPeak(args.tracemalloc) if args.tracemalloc else None
    started = time.time()
    with DagsterInstance.get() as instance:
        # As `dagster api execute_run` runs a launched run (`core_execute_run`): the events
        # are consumed as they come, not kept (`execute_job` keeps them all for its result).
        recon = repo.get_reconstructable_job(name)
        run = instance.create_run_for_job(
            recon.get_definition(),
            run_config={"execution": {"config": config}},
            job_code_origin=recon.get_python_origin(),
        )
        if profile:
            profile.enable()
        for _ in execute_run_iterator(recon, run, instance):
            pass
        if profile:
            profile.disable()
            profile.dump_stats(args.cprofile)
        finished = instance.get_run_by_id(run.run_id)
        success = finished is not None and finished.status == DagsterRunStatus.SUCCESS
    if heap:
        heap.stop()
    marks = {p.stem: json.loads(p.read_text()) for p in Path(MARKS).glob("*.json")}
    args.out.write_text(
        json.dumps(
            {
                "success": success,
                "run_id": run.run_id,
                "wall_s": time.time() - started,
                "requests": dict(counter.kinds),
                "detail": dict(counter.detail),
                "created": counter.created,
                "marks": marks,
            }
        )
    )


if __name__ == "__main__":
    main()
