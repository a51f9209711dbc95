"""`Gang`: run one function on every rank of a multi-node step and get rank 0's result.

Under Slurm (the step runs inside its gang allocation) the ranks are started with one bounded
`srun`; on Kubernetes (the step runs in pod 0 of its gang Job) each pod starts its node's ranks
(see `gangpods`); under the local backend they are `nodes × tasks_per_node` local processes,
so the same asset runs on a laptop. Each rank runs
`python -m k8s_ai_orchestrator.gang <payload dir>`: it loads the pickled function and
arguments, sets RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK, MASTER_ADDR and MASTER_PORT, calls
the function and writes its result or traceback to a file.

The function is pickled by reference, so it must be importable: define it at module level in
a module the step can import (not in `__main__`, not a lambda or closure).

Example:
    >>> from dagster import asset
    >>> from k8s_ai_orchestrator import compute
    >>> from k8s_ai_orchestrator.gang import Gang
    >>> def train_rank(epochs):  # at module level
    ...     import os
    ...     return int(os.environ["WORLD_SIZE"])
    >>> @asset(op_tags=compute(nodes=2, tasks_per_node=1))
    ... def model(gang: Gang) -> int:
    ...     return gang.run(train_rank, 3)
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dagster import ConfigurableResource
from pydantic import Field

from .errors import GangError
from .gangpods import GangCall, lead_call, leader_address
from .stepenv import CPUS, GANG_DIR, NODE_NAME, SLURM_FAILED_MARKER, SLURM_JOB_DIR, StepEnv

PAYLOAD = "payload.pkl"
META = "meta.pkl"


@dataclass(frozen=True)
class GangPlan:
    """Where and how the ranks of one `Gang.run` call start."""

    mode: str  # "local", "slurm" or "kubernetes"
    nodes: int
    tasks_per_node: int
    gpus_per_node: int
    cpus_per_task: int
    python: str
    timeout_s: float | None  # the whole gang
    straggler_timeout_s: float  # ranks still running this long after the first one exited
    srun_args: tuple[str, ...] = ()

    @property
    def world_size(self) -> int:
        return self.nodes * self.tasks_per_node


class Gang(ConfigurableResource):  # type: ignore[misc]
    """Runs a function on every rank of the step's allocation.

    Example:
        >>> from k8s_ai_orchestrator.gang import Gang
        >>> Gang(timeout_s=600).timeout_s
        600.0
    """

    timeout_s: float | None = Field(
        default=None, description="Fail the step if the ranks run longer than this (seconds)."
    )
    straggler_timeout_s: float = Field(
        default=60.0,
        description="Once one rank has exited, kill the others after this many seconds.",
    )
    python: str | None = Field(
        default=None, description="Interpreter for the ranks; default: the step's own."
    )
    workdir: str | None = Field(
        default=None,
        description="Shared directory for payloads/results; default: the Slurm job directory "
        "(or a temporary directory on the local backend).",
    )
    srun_args: list[str] = Field(default_factory=list, description="Extra srun arguments.")

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run `fn(*args)` on every rank and return rank 0's result.

        Raises:
            GangError: a rank failed (the message carries its traceback), the gang timed out,
                or `fn` is not importable by the ranks.

        Example:
            >>> Gang().run(len, "abc")  # one local rank outside a multi-node step
            3
        """
        self._check_settings()
        env = os.environ
        step = StepEnv.current(env)
        plan = GangPlan(
            mode=_mode(step, env),
            nodes=step.nodes,
            tasks_per_node=step.tasks_per_node,
            gpus_per_node=step.gpus_per_node,
            cpus_per_task=max(1, int(-(-float(env.get(CPUS, "1")) // 1))),
            python=self.python or sys.executable,
            timeout_s=self.timeout_s,
            straggler_timeout_s=self.straggler_timeout_s,
            srun_args=tuple(self.srun_args),
        )
        try:
            return run_gang(plan, fn, args, base_dir=self._base_dir(plan, env))
        except GangError as exc:
            if plan.mode == "slurm" and env.get(SLURM_JOB_DIR):
                _mark_job_failed(Path(env[SLURM_JOB_DIR]), exc)
            raise

    def _check_settings(self) -> None:
        """Refuse settings that would hang, time out at once, or split the ranks' paths."""
        if self.timeout_s is not None and not self.timeout_s > 0:
            raise GangError(
                f"Gang(timeout_s={self.timeout_s!r}): give seconds > 0, or None for no limit"
            )
        if not self.straggler_timeout_s >= 0:
            raise GangError(
                f"Gang(straggler_timeout_s={self.straggler_timeout_s!r}): give seconds >= 0"
            )
        if self.workdir is not None and not os.path.isabs(self.workdir):
            raise GangError(
                f"Gang(workdir={self.workdir!r}) is a relative path: each node would resolve it "
                "against its own working directory; give an absolute path on a filesystem "
                "every node mounts"
            )

    def _base_dir(self, plan: GangPlan, env: Mapping[str, str]) -> Path:
        if plan.mode == "kubernetes":  # the directory the worker pods watch
            return Path(env[GANG_DIR])
        if self.workdir:
            return Path(self.workdir)
        if env.get(SLURM_JOB_DIR):
            return Path(env[SLURM_JOB_DIR])
        if plan.mode == "slurm" and plan.nodes > 1:
            raise GangError(
                f"Gang under Slurm needs a directory every node sees; {SLURM_JOB_DIR} is not set. "
                "Set Gang(workdir=...) to a shared filesystem path"
            )
        return Path(tempfile.gettempdir())


def _mark_job_failed(job_dir: Path, error: GangError) -> None:
    """Leave the marker that makes the batch script exit 1: the step process itself exits 0
    after Dagster records the failure, and sacct would show the job COMPLETED."""
    first_line = str(error).splitlines()[0] if str(error) else "a gang rank failed"
    with contextlib.suppress(OSError):  # the step still fails with the GangError
        (job_dir / SLURM_FAILED_MARKER).write_text(f"{first_line}\n")


def _mode(step: StepEnv, env: Mapping[str, str]) -> str:
    if step.backend == "kubernetes" and step.nodes > 1:
        if not env.get(GANG_DIR):
            raise GangError(
                f"K8S_AI_BACKEND=kubernetes with {step.nodes} nodes but {GANG_DIR} is not set: "
                "Gang.run must be called inside the step's own gang Job (a step launched by "
                "ai_executor's kubernetes backend)"
            )
        return "kubernetes"
    if step.backend != "slurm":
        return "local"
    if "SLURM_JOB_ID" not in env:
        raise GangError(
            "K8S_AI_BACKEND=slurm but SLURM_JOB_ID is not set: Gang.run must be called inside "
            "the step's Slurm allocation (a step launched by ai_executor's Slurm backend)"
        )
    return "slurm"


def run_gang(plan: GangPlan, fn: Callable[..., Any], args: tuple[Any, ...], base_dir: Path) -> Any:
    """Write the payload, start the ranks, wait for them and return rank 0's result."""
    directory = Path(base_dir) / f"gang-{uuid.uuid4().hex[:12]}"
    directory.mkdir(parents=True)
    try:
        _write_payload(directory, fn, args)
        argv = [plan.python, "-m", "k8s_ai_orchestrator.gang", str(directory)]
        launch = {"slurm": launch_srun, "kubernetes": launch_pods}.get(plan.mode, launch_local)
        return _collect(plan, directory, launch(plan, directory, _free_port(), argv))
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def _write_payload(directory: Path, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    name = getattr(fn, "__qualname__", repr(fn))
    if getattr(fn, "__module__", None) == "__main__":
        raise GangError(
            f"Gang.run({name}): functions defined in __main__ cannot be loaded by the ranks; "
            "move it to an importable module"
        )
    try:
        payload = pickle.dumps((fn, args))
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        raise GangError(
            f"Gang.run({name}): the function and its arguments must be picklable by "
            f"reference ({exc}); define the function at module level, not as a lambda or "
            "inside another function"
        ) from None
    (directory / PAYLOAD).write_bytes(payload)
    meta = {"sys_path": _import_roots(fn) + list(sys.path), "cwd": os.getcwd()}
    (directory / META).write_bytes(pickle.dumps(meta))


def _import_roots(fn: Callable[..., Any]) -> list[str]:
    """The directory `fn`'s module was imported from: Dagster adds a code location's working
    directory to sys.path only while it loads the definitions."""
    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(module, "__file__", None)
    if module is None or not path:
        return []
    root = Path(path).resolve().parent
    depth = module.__name__.count(".") + (Path(path).name == "__init__.py")
    for _ in range(depth):
        root = root.parent
    return [str(root)]


def _collect(plan: GangPlan, directory: Path, outcome: LaunchOutcome) -> Any:
    records = {}
    for rank in range(plan.world_size):
        path = directory / f"rank-{rank}.pkl"
        if path.exists():
            records[rank] = pickle.loads(path.read_bytes())
    failed = sorted(rank for rank, record in records.items() if not record["ok"])
    if failed:
        first = records[failed[0]]
        raise GangError(
            f"gang rank {failed[0]} of {plan.world_size} failed on {first['node']}: "
            f"{first['error']}\n{first['traceback']}"
        )
    if outcome.timed_out:
        raise GangError(
            f"gang of {plan.world_size} ranks did not finish: {outcome.detail}; "
            "raise Gang(timeout_s=...) or straggler_timeout_s, or look for a rank that waits "
            "on a peer that already exited"
        )
    missing = [rank for rank in range(plan.world_size) if rank not in records]
    if missing or outcome.returncode != 0:
        raise GangError(
            f"gang ranks {missing or 'all'} of {plan.world_size} ended without a result "
            f"({outcome.detail}); a rank was killed (out of memory? node lost?) — see the "
            "step log for its output"
        )
    return records[0]["value"]


@dataclass(frozen=True)
class LaunchOutcome:
    """How the rank processes ended."""

    returncode: int  # 0 when every rank exited 0
    timed_out: bool
    detail: str  # for error messages


def launch_local(
    plan: GangPlan,
    directory: Path,
    port: int,
    argv: Sequence[str],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    kill_grace_s: float = 5.0,
) -> LaunchOutcome:
    """Start `plan.world_size` local rank processes and supervise them until all exit, one
    fails (the others are stopped at once) or a timeout passes (all are stopped)."""
    procs = []
    try:
        for rank in range(plan.world_size):
            env = dict(os.environ)
            env.update(
                RANK=str(rank),
                WORLD_SIZE=str(plan.world_size),
                LOCAL_RANK=str(rank % plan.tasks_per_node),
                NODE_RANK=str(rank // plan.tasks_per_node),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                K8S_AI_GANG_MODE="local",
            )
            procs.append(subprocess.Popen(list(argv), env=env, stdin=subprocess.DEVNULL))
        return _supervise(procs, plan, clock, sleep)
    finally:
        _stop(procs, kill_grace_s)


def _supervise(
    procs: list[subprocess.Popen[bytes]],
    plan: GangPlan,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> LaunchOutcome:
    started, first_exit = clock(), None
    while True:
        codes = [proc.poll() for proc in procs]
        failed = [(rank, code) for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            rank, code = failed[0]
            return LaunchOutcome(code or 1, False, f"rank {rank} exited with code {code}")
        if all(code == 0 for code in codes):
            return LaunchOutcome(0, False, "every rank exited 0")
        now = clock()
        running = [rank for rank, code in enumerate(codes) if code is None]
        if first_exit is None and len(running) < len(procs):
            first_exit = now
        if plan.timeout_s is not None and now - started > plan.timeout_s:
            return LaunchOutcome(
                -1, True, f"ranks {running} still running after {plan.timeout_s:g}s"
            )
        if first_exit is not None and now - first_exit > plan.straggler_timeout_s:
            detail = (
                f"ranks {running} still running {plan.straggler_timeout_s:g}s after a peer exited"
            )
            return LaunchOutcome(-1, True, detail)
        sleep(0.05)


def _stop(procs: Sequence[subprocess.Popen[bytes]], grace_s: float) -> None:
    alive = [proc for proc in procs if proc.poll() is None]
    for proc in alive:
        proc.send_signal(signal.SIGTERM)
    for proc in alive:
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=grace_s)


def launch_pods(plan: GangPlan, directory: Path, port: int, argv: Sequence[str]) -> LaunchOutcome:
    """Publish the call to the gang's worker pods and run node 0's ranks in this (the leader)
    pod; a failing rank or a timeout stops the ranks on every pod (see `gangpods`)."""
    call = GangCall(
        directory,
        plan.world_size,
        plan.tasks_per_node,
        leader_address(os.environ),
        port,
        tuple(argv),
    )
    code, timed_out, detail = lead_call(
        call, timeout_s=plan.timeout_s, straggler_timeout_s=plan.straggler_timeout_s
    )
    return LaunchOutcome(code, timed_out, detail)


def launch_srun(
    plan: GangPlan, directory: Path, port: int, argv: Sequence[str], *, kill_grace_s: float = 5.0
) -> LaunchOutcome:
    """Start the ranks with one `srun` inside the job's allocation, bounded by the plan's
    timeouts; `--kill-on-bad-exit` stops every rank as soon as one fails."""
    name = f"k8sai-{directory.name}"
    command = [
        "srun",
        f"--job-name={name}",
        f"--nodes={plan.nodes}",
        f"--ntasks={plan.world_size}",
        f"--ntasks-per-node={plan.tasks_per_node}",
        f"--cpus-per-task={plan.cpus_per_task}",
        "--kill-on-bad-exit=1",
        f"--wait={max(1, int(plan.straggler_timeout_s))}",
        "--label",
    ]
    if plan.gpus_per_node:
        command.append(f"--gres=gpu:{plan.gpus_per_node}")
    command += [*plan.srun_args, *argv]
    env = dict(os.environ, MASTER_PORT=str(port), K8S_AI_GANG_MODE="slurm")
    proc = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL)
    try:
        code = proc.wait(timeout=plan.timeout_s)
        return LaunchOutcome(code, False, f"srun exited with code {code}")
    except subprocess.TimeoutExpired:
        return LaunchOutcome(-1, True, f"srun still running after {plan.timeout_s:g}s")
    finally:
        if proc.poll() is None:
            _stop([proc], kill_grace_s)
            _cancel_steps(name, kill_grace_s)


def _cancel_steps(name: str, timeout_s: float) -> None:
    """scancel the job steps srun started (srun may die without stopping its remote tasks)."""
    listing = ["squeue", "-h", "-s", "-j", os.environ.get("SLURM_JOB_ID", ""), "-o", "%i %j"]
    with contextlib.suppress(subprocess.TimeoutExpired, OSError):
        out = subprocess.run(listing, capture_output=True, text=True, timeout=timeout_s * 4).stdout
        steps = [line.split()[0] for line in out.splitlines() if line.endswith(" " + name)]
        if steps:
            subprocess.run(["scancel", *steps], timeout=timeout_s * 4, capture_output=True)


def _rank_identity(env: Mapping[str, str]) -> dict[str, str]:
    """RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK for this rank (from srun's variables if any)."""
    if "SLURM_PROCID" in env and env.get("K8S_AI_GANG_MODE") == "slurm":
        return {
            "RANK": env["SLURM_PROCID"],
            "WORLD_SIZE": env["SLURM_NTASKS"],
            "LOCAL_RANK": env["SLURM_LOCALID"],
            "NODE_RANK": env["SLURM_NODEID"],
            "MASTER_ADDR": env.get("SLURM_LAUNCH_NODE_IPADDR", "127.0.0.1"),
        }
    return {key: env[key] for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK")}


def rank_main(directory: Path) -> int:
    """Entry point of one rank: run the payload, write `rank-<n>.pkl`, return the exit code."""
    os.environ.update(_rank_identity(os.environ))
    rank = int(os.environ["RANK"])
    meta = pickle.loads((directory / META).read_bytes())
    sys.path[:] = meta["sys_path"] + [p for p in sys.path if p not in meta["sys_path"]]
    with contextlib.suppress(OSError):  # a node without the step's directory keeps its own
        os.chdir(meta["cwd"])
    node = os.environ.get("SLURMD_NODENAME") or os.environ.get(NODE_NAME) or socket.gethostname()
    record: dict[str, Any] = {"ok": True, "value": None, "node": node}
    try:
        fn, args = pickle.loads((directory / PAYLOAD).read_bytes())
        value = fn(*args)
        record["value"] = value if rank == 0 else None
        data = pickle.dumps(record)
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the driver
        record.update(ok=False, value=None, error=f"{type(exc).__name__}: {exc}")
        record["traceback"] = traceback.format_exc()
        data = pickle.dumps(record)
    tmp = directory / f".rank-{rank}.tmp"
    tmp.write_bytes(data)
    tmp.replace(directory / f"rank-{rank}.pkl")
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(rank_main(Path(sys.argv[1])))
