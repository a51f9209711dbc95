"""The `cli` transport: sbatch, scontrol, sacct, sstat and scancel, run locally or over SSH.

Commands go through a `Runner` passed in by the caller, so tests run the real commands and
an SSH login node is only a command prefix.

Example:
    >>> CliTransport(SlurmConfig(ssh_host="login1")).argv(["squeue"])
    ['ssh', '-o', 'BatchMode=yes', '--', 'login1', 'squeue']
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ...errors import BackendError, SubmitError
from . import accounting
from .config import SlurmConfig, job_environment
from .script import BatchJob, run_comment
from .states import JobInfo, expand_hostlist, parse_exit_code, parse_scontrol_job, parse_time


@dataclass(frozen=True)
class CommandResult:
    """Exit status and output of one command."""

    returncode: int
    stdout: str
    stderr: str


# (argv, stdin text or None, timeout seconds) → result; raises TimeoutError when it hangs.
Runner = Callable[[Sequence[str], "str | None", float], CommandResult]


def subprocess_runner(
    env: Mapping[str, str] | None = None,
    base: Mapping[str, str] | None = None,
    *,
    capture: bool = True,
) -> Runner:
    """A `Runner` that runs commands here with `env` added to `base` (default: this process's
    environment); with `capture=False` their output goes to this process's stdout and stderr
    as it comes (the result's are empty)."""
    full_env = {**(os.environ if base is None else base), **(env or {})}

    def run(argv: Sequence[str], stdin: str | None, timeout_s: float) -> CommandResult:
        try:
            done = subprocess.run(
                list(argv),
                input=stdin,
                capture_output=capture,
                text=True,
                timeout=timeout_s,
                env=full_env,
                stdin=None if stdin is not None else subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{shlex.join(argv)} did not finish in {timeout_s:g}s") from None
        return CommandResult(done.returncode, done.stdout or "", done.stderr or "")

    return run


@dataclass(frozen=True)
class NodeLimits:
    """The largest job a partition can ever run."""

    partition: str
    nodes: tuple[str, ...]
    max_gpus_per_node: int
    max_cpus_per_node: int
    max_memory_mb_per_node: int


class CliTransport:
    """Talk to Slurm through its command-line tools."""

    def __init__(self, config: SlurmConfig, runner: Runner | None = None) -> None:
        self.config = config
        env = {"SLURM_CONF": config.slurm_conf} if config.slurm_conf else {}
        # sbatch exports its whole environment to the job: the same set the REST transport sends
        self._runner = runner or subprocess_runner(env, job_environment(os.environ, config))

    def argv(self, argv: Sequence[str]) -> list[str]:
        """The command line to run: unchanged locally, wrapped in ssh for a login node."""
        if not self.config.ssh_host:
            return list(argv)
        remote = shlex.join(argv)
        if self.config.slurm_conf:
            remote = f"SLURM_CONF={shlex.quote(self.config.slurm_conf)} {remote}"
        return ["ssh", "-o", "BatchMode=yes", "--", self.config.ssh_host, remote]

    def _run(self, argv: Sequence[str], stdin: str | None = None) -> CommandResult:
        try:
            return self._runner(self.argv(argv), stdin, self.config.command_timeout_s)
        except (TimeoutError, OSError) as exc:
            raise BackendError(
                f"Slurm command {argv[0]} failed: {exc}; check that slurmctld answers "
                "(`scontrol ping`)",
                transient=True,
            ) from exc

    def prepare_dir(self, path: str) -> None:
        """Create the attempt's directory in the shared workdir."""
        if not self.config.ssh_host:
            os.makedirs(path, exist_ok=True)
            return
        done = self._run(["mkdir", "-p", path])
        if done.returncode != 0:
            raise SubmitError(f"cannot create {path} on {self.config.ssh_host}: {done.stderr}")

    def submit(self, job: BatchJob, script: str, step_key: str) -> str:
        done = self._run(["sbatch", "--parsable"], stdin=script)
        if done.returncode != 0:
            raise SubmitError(
                f"step '{step_key}': sbatch refused the job: {done.stderr.strip()}; "
                "check the partition, account and sizes in the executor's slurm config"
            )
        return done.stdout.strip().split(";")[0]

    def find(self, job: BatchJob) -> str | None:
        """The id of the job slurmctld still knows with `job`'s name and comment (its run,
        step and attempt), or None."""
        argv = ["squeue", "--noheader", "--states=all", f"--name={job.name}", "--format=%i|%k"]
        done = self._run(argv)
        if done.returncode != 0:
            raise BackendError(f"squeue --name={job.name}: {done.stderr.strip()}", transient=True)
        return matching_job(done.stdout.splitlines(), job.comment)

    def run_jobs(self, run_id: str) -> list[str]:
        """The ids of the pending and running jobs of `run_id` (their comment names it)."""
        done = self._run(["squeue", "--noheader", "--format=%i|%k"])
        if done.returncode != 0:
            raise BackendError(f"squeue: {done.stderr.strip()}", transient=True)
        return of_run(done.stdout.splitlines(), run_id)

    def job_info(self, job_id: str) -> JobInfo | None:
        done = self._run(["scontrol", "show", "job", "-o", job_id])
        if done.returncode == 0 and done.stdout.strip():
            return parse_scontrol_job(done.stdout.strip().splitlines()[0])
        if "Invalid job id" not in done.stderr:
            raise BackendError(f"scontrol show job {job_id}: {done.stderr.strip()}", transient=True)
        return self._accounting(job_id)

    def _accounting(self, job_id: str) -> JobInfo | None:
        """Finished jobs slurmctld has forgotten, from the job completion log (`sacct -c`)."""
        fields = "JobID,State,ExitCode,NodeList,Start,End,NCPUS"
        done = self._run(["sacct", "-c", "-j", job_id, "-n", "-P", "-o", fields])
        for line in done.stdout.splitlines():
            parts = line.split("|")
            if len(parts) == 7 and parts[0] == job_id:
                exit_code, signal = parse_exit_code(parts[2])
                return JobInfo(
                    job_id=job_id,
                    state=parts[1].split()[0],
                    exit_code=exit_code,
                    signal=signal,
                    nodes=expand_hostlist(parts[3]),
                    start_time=parse_time(parts[4]),
                    end_time=parse_time(parts[5]),
                    cpus=int(parts[6] or 0),
                )
        return None

    def cancel(self, job_id: str) -> None:
        done = self._run(["scancel", job_id])
        if done.returncode != 0 and "Invalid job id" not in done.stderr:
            raise BackendError(f"scancel {job_id}: {done.stderr.strip()}", transient=True)

    def max_rss_bytes(self, job_id: str) -> int | None:
        """Largest RSS of any task of a running job (`sstat`), or None when unknown."""
        done = self._run(["sstat", "-a", "-j", job_id, "-n", "-P", "-o", "MaxRSS"])
        return accounting.max_rss(done.stdout.split())

    def measured(self, job_id: str) -> accounting.Measured | None:
        """A finished job's peak RSS and CPU time from slurmdbd (`sacct`, every run of a
        requeued job); None when the cluster keeps no accounting or has no record yet."""
        argv = ["sacct", "-D", "-j", job_id, "-n", "-P", "-o", "JobID,State,MaxRSS,TotalCPU"]
        done = self._run(argv)
        if done.returncode != 0:
            return None
        return accounting.from_sacct(done.stdout.splitlines(), job_id)

    def limits(self, partition: str | None) -> NodeLimits:
        target = ["scontrol", "show", "partition", "-o"] + ([partition] if partition else [])
        done = self._run(target)
        rows = [dict(_pairs(line)) for line in done.stdout.splitlines() if line.strip()]
        if partition is None:
            rows = [row for row in rows if row.get("Default") == "YES"] or rows[:1]
        if done.returncode != 0 or not rows:
            raise SubmitError(
                f"Slurm partition {partition or '(default)'} not found: {done.stderr.strip()}; "
                "set slurm.partition to one listed by `sinfo -s`"
            )
        names = expand_hostlist(rows[0].get("Nodes", ""))
        nodes_out = self._run(["scontrol", "show", "node", "-o"]).stdout
        node_rows = [dict(_pairs(line)) for line in nodes_out.splitlines() if line.strip()]
        node_rows = [row for row in node_rows if row.get("NodeName") in names]
        return NodeLimits(
            partition=rows[0].get("PartitionName", partition or ""),
            nodes=names,
            max_gpus_per_node=max((_gpus(row.get("Gres", "")) for row in node_rows), default=0),
            max_cpus_per_node=max((int(row.get("CPUTot", 0)) for row in node_rows), default=0),
            max_memory_mb_per_node=max(
                (int(row.get("RealMemory", 0)) for row in node_rows), default=0
            ),
        )


def matching_job(rows: Sequence[str], comment: str) -> str | None:
    """The newest job id of `id|comment` rows whose comment is `comment`.

    Example:
        >>> rows = ["41|k8s_ai:run=r1,step=a,attempt=0", "42|k8s_ai:run=r1,step=a,attempt=1"]
        >>> matching_job(rows, "k8s_ai:run=r1,step=a,attempt=1")
        '42'
    """
    found = [
        row.split("|", 1)[0].strip() for row in rows if row.partition("|")[2].strip() == comment
    ]
    return max(found, key=lambda job_id: int(job_id) if job_id.isdigit() else 0, default=None)


def of_run(rows: Sequence[str], run_id: str) -> list[str]:
    """The job ids of `id|comment` rows whose comment is one of `run_id`'s jobs."""
    prefix = run_comment(run_id) + ","
    pairs = [row.partition("|") for row in rows]
    return [job_id.strip() for job_id, _, text in pairs if text.strip().startswith(prefix)]


def _pairs(line: str) -> list[tuple[str, str]]:
    return [
        (key, value) for key, _, value in (word.partition("=") for word in line.split()) if value
    ]


def _gpus(gres: str) -> int:
    """ "gpu:2", "gpu:a100:4(S:0-1)", "gpu:2,nic:1" → GPUs on the node."""
    total = 0
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total
