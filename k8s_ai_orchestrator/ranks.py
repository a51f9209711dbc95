"""The ranks of one `Gang.run` call: the plan, each rank's environment, and the rank process.

Every backend starts the same rank program, `python -m k8s_ai_orchestrator.ranks <payload
dir>` (`rank_argv`): it loads the pickled function and arguments, sets RANK, WORLD_SIZE,
LOCAL_RANK, NODE_RANK, MASTER_ADDR and MASTER_PORT, calls the function and writes its result
or traceback to `rank-<n>.pkl` beside the payload. How the ranks start is the backend's (a
`RankLauncher`: local processes, `srun`, the pods of a Kubernetes gang); `run_gang` writes the
payload, hands it to the launcher and reads the results back.

The function is pickled by reference, so it must be importable: define it at module level in
a module the step can import (not in `__main__`, not a lambda or closure).

Example:
    >>> rank_env(node_rank=1, local_rank=0, world_size=4, tasks_per_node=2,
    ...          master_addr="10.0.0.7", master_port=29500, mode="kubernetes")["RANK"]
    '2'
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import socket
import sys
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .errors import GangError
from .stepenv import NODE_NAME, SLURM_JOB_DIR

PAYLOAD = "payload.pkl"
META = "meta.pkl"
GANG_MODE = "K8S_AI_GANG_MODE"  # "local", "slurm" or "kubernetes": who started the rank


@dataclass(frozen=True)
class GangPlan:
    """How many ranks one `Gang.run` call starts, and its limits."""

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


@dataclass(frozen=True)
class LaunchOutcome:
    """How the rank processes ended."""

    returncode: int  # 0 when every rank exited 0
    timed_out: bool
    detail: str  # for error messages


class RankLauncher(Protocol):
    """How one backend starts the ranks of a `Gang.run` call and waits for them."""

    def directory(self, plan: GangPlan, workdir: str | None) -> Path:
        """Where the call's payload and results go (`workdir` if given): every rank sees it."""
        ...

    def launch(
        self, plan: GangPlan, directory: Path, port: int, argv: Sequence[str]
    ) -> LaunchOutcome:
        """Start `plan.world_size` ranks running `argv` and wait until they end."""
        ...

    def failed(self, error: GangError) -> None:
        """The call failed: leave what the backend needs to fail the step as well."""
        ...


def rank_env(
    *,
    node_rank: int,
    local_rank: int,
    world_size: int,
    tasks_per_node: int,
    master_addr: str,
    master_port: int,
    mode: str,
) -> dict[str, str]:
    """The variables one rank gets, the same under every backend."""
    return {
        "RANK": str(node_rank * tasks_per_node + local_rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_RANK": str(local_rank),
        "NODE_RANK": str(node_rank),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        GANG_MODE: mode,
    }


def given_directory(workdir: str | None, environ: Mapping[str, str]) -> Path | None:
    """The gang directory the user or the Slurm job named: `Gang(workdir=...)`, else the
    Slurm job's own directory; None when neither is set (the launcher chooses).

    Example:
        >>> given_directory(None, {"K8S_AI_SLURM_JOB_DIR": "/shared/job-7"})
        PosixPath('/shared/job-7')
        >>> given_directory(None, {}) is None
        True
    """
    if workdir:
        return Path(workdir)
    job_dir = environ.get(SLURM_JOB_DIR)
    return Path(job_dir) if job_dir else None


def rank_argv(python: str, directory: Path) -> list[str]:
    """The command line of one rank: this module, run by `python`, on the call's directory."""
    return [python, "-m", __name__, str(directory)]


def run_gang(
    plan: GangPlan,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    base_dir: Path,
    launcher: RankLauncher,
) -> Any:
    """Write the payload, start the ranks, wait for them and return rank 0's result."""
    directory = Path(base_dir) / f"gang-{uuid.uuid4().hex[:12]}"
    directory.mkdir(parents=True)
    try:
        _write_payload(directory, fn, args)
        argv = rank_argv(plan.python, directory)
        return _collect(plan, directory, launcher.launch(plan, directory, _free_port(), argv))
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


def _rank_identity(env: Mapping[str, str]) -> dict[str, str]:
    """RANK, WORLD_SIZE, LOCAL_RANK, NODE_RANK for this rank (from srun's variables if any)."""
    if "SLURM_PROCID" in env and env.get(GANG_MODE) == "slurm":
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
