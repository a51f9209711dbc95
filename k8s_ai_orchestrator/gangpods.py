"""The pods of a multi-node step on Kubernetes: one leader that runs the step, workers that
run their node's ranks of each `Gang.run`.

A gang step is one Indexed Job with one pod per node. Every pod runs
`pod_main(["--", *<step argv>])`; the Job controller gives each its
`JOB_COMPLETION_INDEX`, which is the node rank. Pod 0 (the leader) runs the Dagster step
process and, when it exits, leaves `done` in the attempt's gang directory (`K8S_AI_GANG_DIR`,
on the volume every pod mounts) and exits with the step's code. The other pods (workers) watch
that directory: when `Gang.run` in the step publishes a call (`gang-<id>/ready`), each starts
its `tasks_per_node` ranks; the ranks write their results or tracebacks beside the payload,
exactly as under Slurm. A worker exits 0 once `done` appears.

Stopping: when a rank fails or the call times out, the leader writes `gang-<id>/stop` and
every worker stops its ranks of that call at once (SIGTERM, then SIGKILL).

The Kubernetes backend starts every pod of a gang Job with `pod_main` (`jobs.GANG_POD_MAIN`);
this module imports no Dagster, so a worker pod only starts ranks. The step's `Gang.run` leads
each call with `lead_call` (`backends/kubernetes/rank_launcher.py`).

Example:
    >>> leader_address({"K8S_AI_POD_IP": "10.0.0.7"})
    '10.0.0.7'
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from .ranks import rank_env
from .stepenv import GANG_DIR, POD_IP

INDEX = "JOB_COMPLETION_INDEX"  # set by the Job controller in every pod of an Indexed Job
READY = "ready"  # JSON: how the ranks of one Gang.run call start
STOP = "stop"  # the leader gave up on a call: workers stop their ranks
DONE = "done"  # the step process exited: workers exit
POLL_S = 0.1


@dataclass(frozen=True)
class GangCall:
    """One `Gang.run` call as the pods see it (the `ready` file)."""

    directory: Path
    world_size: int
    tasks_per_node: int
    master_addr: str
    master_port: int
    argv: tuple[str, ...]

    def publish(self) -> None:
        """Write `ready` atomically: workers start their ranks when they see it."""
        body = {
            "world_size": self.world_size,
            "tasks_per_node": self.tasks_per_node,
            "master_addr": self.master_addr,
            "master_port": self.master_port,
            "argv": list(self.argv),
        }
        tmp = self.directory / f".{READY}.tmp"
        tmp.write_text(json.dumps(body))
        tmp.replace(self.directory / READY)

    @classmethod
    def read(cls, directory: Path) -> GangCall:
        body = json.loads((directory / READY).read_text())
        return cls(
            directory,
            int(body["world_size"]),
            int(body["tasks_per_node"]),
            str(body["master_addr"]),
            int(body["master_port"]),
            tuple(body["argv"]),
        )

    def start_ranks(self, node_rank: int) -> list[subprocess.Popen[bytes]]:
        """Start this node's ranks of the call."""
        procs = []
        for local in range(self.tasks_per_node):
            env = dict(os.environ)
            env.update(
                rank_env(
                    node_rank=node_rank,
                    local_rank=local,
                    world_size=self.world_size,
                    tasks_per_node=self.tasks_per_node,
                    master_addr=self.master_addr,
                    master_port=self.master_port,
                    mode="kubernetes",
                )
            )
            procs.append(subprocess.Popen(list(self.argv), env=env, stdin=subprocess.DEVNULL))
        return procs

    def stop(self) -> None:
        """Tell every worker to stop its ranks of this call."""
        with contextlib.suppress(OSError):
            (self.directory / STOP).touch()

    @property
    def stopped(self) -> bool:
        return (self.directory / STOP).exists()

    def records(self) -> dict[int, dict[str, object]]:
        """The results and tracebacks the ranks wrote so far, by rank."""
        found = {}
        for rank in range(self.world_size):
            path = self.directory / f"rank-{rank}.pkl"
            if path.exists():
                found[rank] = pickle.loads(path.read_bytes())
        return found


def leader_address(environ: Mapping[str, str]) -> str:
    """Rank 0's address: the leader pod's IP (Downward API), reachable from every pod."""
    return environ.get(POD_IP) or "127.0.0.1"


def lead_call(
    call: GangCall,
    *,
    timeout_s: float | None,
    straggler_timeout_s: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    kill_grace_s: float = 5.0,
) -> tuple[int, bool, str]:
    """Publish the call, run node 0's ranks in the leader pod and follow every rank's result.

    Returns (exit code, timed out, detail); the caller reads the results. A failed rank, a
    local rank dying without a result or a timeout stops the whole call on every pod.
    """
    call.publish()
    procs = call.start_ranks(0)
    started, first_exit = clock(), None
    try:
        while True:
            records = call.records()
            failed = sorted(rank for rank, record in records.items() if not record["ok"])
            codes = [proc.poll() for proc in procs]
            dead = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
            if failed or dead:
                call.stop()
                if failed:
                    return 1, False, f"rank {failed[0]} failed"
                return dead[0][1] or 1, False, f"rank {dead[0][0]} exited with code {dead[0][1]}"
            if len(records) == call.world_size and all(code == 0 for code in codes):
                return 0, False, "every rank exited 0"
            now = clock()
            waiting = [rank for rank in range(call.world_size) if rank not in records]
            if first_exit is None and records:
                first_exit = now
            if timeout_s is not None and now - started > timeout_s:
                call.stop()
                return -1, True, f"ranks {waiting} still running after {timeout_s:g}s"
            if first_exit is not None and now - first_exit > straggler_timeout_s:
                call.stop()
                return (
                    -1,
                    True,
                    (f"ranks {waiting} still running {straggler_timeout_s:g}s after a peer exited"),
                )
            sleep(POLL_S)
    finally:
        _stop(procs, kill_grace_s)


def _stop(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    # the run worker imports this module for its name only: psutil loads in the pod
    from .proctree import stop_processes

    stop_processes(procs, grace_s)


def serve_call(
    call: GangCall,
    node_rank: int,
    *,
    sleep: Callable[[float], None] = time.sleep,
    kill_grace_s: float = 5.0,
) -> None:
    """Run this node's ranks of one call until they exit, one fails, or the leader stops it."""
    procs = call.start_ranks(node_rank)
    try:
        while True:
            codes = [proc.poll() for proc in procs]
            if all(code is not None for code in codes) or any(code for code in codes):
                return
            if call.stopped:
                return
            sleep(POLL_S)
    finally:
        _stop(procs, kill_grace_s)


def serve(gang_dir: Path, node_rank: int, *, sleep: Callable[[float], None] = time.sleep) -> int:
    """A worker pod: run this node's ranks of every published call until the step is done."""
    served: set[str] = set()
    while not (gang_dir / DONE).exists():
        calls = sorted(gang_dir.glob(f"gang-*/{READY}")) if gang_dir.is_dir() else []
        for ready in calls:
            if ready.parent.name not in served and not (ready.parent / STOP).exists():
                served.add(ready.parent.name)
                serve_call(GangCall.read(ready.parent), node_rank, sleep=sleep)
        sleep(POLL_S)
    return 0


def lead(gang_dir: Path, step_argv: Sequence[str]) -> int:
    """The leader pod: run the step process, pass SIGTERM on to it, then leave `done`."""
    gang_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(list(step_argv))

    def forward(signum: int, _frame: FrameType | None) -> None:
        proc.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, forward)
    code = proc.wait()
    (gang_dir / DONE).touch()
    return code


def pod_main(argv: Sequence[str]) -> int:
    """Entry point of every pod of a gang Job: `-- <step argv>`."""
    step_argv = list(argv[1:] if argv and argv[0] == "--" else argv)
    gang_dir = Path(os.environ[GANG_DIR])
    index = int(os.environ.get(INDEX, "0"))
    if index == 0:
        return lead(gang_dir, step_argv)
    return serve(gang_dir, index)
