"""The batch job of one step attempt: its options and its bash script.

Every user-controlled value (step key, run id, environment, command line) reaches the script
either through `shlex.quote` or after reduction to a safe character set; nothing is pasted.
An `#SBATCH` value is refused when sbatch's line parser cannot carry it (a control character
such as a newline), and is otherwise double-quoted and escaped when it holds a character that
parser reads specially (whitespace, quotes, backslash, `#`).

Example:
    >>> safe_name("train[part=2024-01-01]; rm -rf /")
    'train_part_2024-01-01___rm_-rf__-0cfc031b'
"""

from __future__ import annotations

import hashlib
import math
import re
import shlex
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import quote

from ...errors import SubmitError
from ...stepenv import SLURM_FAILED_MARKER, SLURM_JOB_DIR
from ..base import LaunchRequest
from .config import SHELL_VAR_NAME, SlurmConfig

MiB = 1024**2
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_GRES_TYPE = re.compile(r"^[A-Za-z0-9_.-]+\Z")
_SBATCH_SPECIAL = re.compile(r"""[\s"'\\#]""")  # what sbatch's #SBATCH parser reads specially
_SBATCH_ESCAPED = re.compile(r"""(["'\\#])""")  # escaped with a backslash inside the quotes
_SBATCH_BLANKED = re.compile(r"(het|pack)(job)", re.IGNORECASE)
_NAME_FIELDS = ("partition", "account", "gpu_type")  # Slurm names: never an option-like '-x'


def safe_name(text: str, limit: int = 60) -> str:
    """`text` reduced to [A-Za-z0-9_.-] (for job names and paths), made unique by a hash
    suffix whenever characters were replaced or the text was cut."""
    cleaned = _UNSAFE.sub("_", text)
    if cleaned == text and len(text) <= limit and text not in ("", ".", ".."):
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:8]
    return f"{cleaned[: max(0, limit - 9)]}-{digest}"


@dataclass(frozen=True)
class BatchJob:
    """One sbatch job: what both transports submit."""

    name: str  # --job-name, safe characters only
    comment: str  # k8s_ai:run=<run>,step=<step>,attempt=<n>, percent-encoded
    nodes: int
    tasks_per_node: int
    cpus_per_task: int
    memory_mb: int  # per node
    gpus_per_node: int
    gpu_type: str | None  # Slurm GRES type ("a100"), None = any
    partition: str | None
    account: str | None
    time_limit_min: int | None
    signal_lead_s: int  # USR2 this long before the time limit
    self_signal_after_s: int | None  # the script's own USR2 timer (slurmrestd has no B: flag)
    requeue: bool  # preemptible steps: requeue on USR2 and on node failure
    job_dir: str  # the attempt's directory in the shared workdir (also the working directory)
    output_path: str  # stdout+stderr, append mode (a requeued job appends)
    env: tuple[tuple[str, str], ...]  # exported before the step process starts
    command: tuple[str, ...]  # the step process argv

    @property
    def gres(self) -> str | None:
        """ "gpu:4" or "gpu:a100:4"; None without GPUs."""
        if not self.gpus_per_node:
            return None
        kind = f"{self.gpu_type}:" if self.gpu_type else ""
        return f"gpu:{kind}{self.gpus_per_node}"

    def directives(self) -> list[str]:
        """The sbatch options, one per `#SBATCH` line, values escaped for sbatch's parser."""
        check_header_values(self.header_values(), f"batch job {self.name!r}")
        return [_escape_directive(option) for option in self._options()]

    def header_values(self) -> dict[str, str | None]:
        """The free-text values that reach `#SBATCH` lines, by field name."""
        return {
            "job name": self.name,
            "comment": self.comment,
            "partition": self.partition,
            "account": self.account,
            "gpu_type": self.gpu_type,
            "workdir": self.job_dir,
            "output": self.output_path,
        }

    def _options(self) -> list[str]:
        options = [
            f"--job-name={self.name}",
            f"--comment={self.comment}",
            f"--nodes={self.nodes}",
            f"--ntasks-per-node={self.tasks_per_node}",
            f"--cpus-per-task={self.cpus_per_task}",
            f"--mem={self.memory_mb}M",
        ]
        if self.gres:
            options.append(f"--gres={self.gres}")
        if self.partition:
            options.append(f"--partition={self.partition}")
        if self.account:
            options.append(f"--account={self.account}")
        if self.time_limit_min:
            options.append(f"--time={self.time_limit_min}")
        options += [
            f"--signal=B:USR2@{self.signal_lead_s}",
            "--requeue" if self.requeue else "--no-requeue",
            "--open-mode=append",
            f"--output={self.output_path}",
            f"--chdir={self.job_dir}",
        ]
        return options


def check_header_values(values: Mapping[str, str | None], where: str) -> None:
    """Refuse a value sbatch's `#SBATCH` line parser cannot carry (the fix is in the message).

    Example:
        >>> try:
        ...     check_header_values({"partition": "gpu\\n#SBATCH --uid=0"}, "step 'train'")
        ... except SubmitError as refusal:
        ...     print(str(refusal).split(" that ")[0])
        step 'train': partition='gpu\\n#SBATCH --uid=0' contains a control character (U+000A)
    """
    for field, value in values.items():
        bad = None if value is None else _control_character(value)
        if bad is not None:
            raise SubmitError(
                f"{where}: {field}={value!r} contains a control character "
                f"(U+{ord(bad):04X}) that an #SBATCH line cannot carry; remove it from the "
                "step's compute(...) tags or the executor's slurm config"
            )
        if field in _NAME_FIELDS and value and value.startswith("-"):
            raise SubmitError(
                f"{where}: {field}={value!r} starts with '-', which Slurm names never do; "
                "use the name that sinfo, sacctmgr or gres.conf lists"
            )


def _control_character(text: str) -> str | None:
    """The first character of `text` that is a control, format or line/paragraph separator."""
    for char in text:
        if unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"):
            return char
    return None


def _escape_directive(option: str) -> str:
    """`--name=value`, the value double-quoted when it holds whitespace, a quote, a backslash,
    `#` or the words `hetjob` / `packjob` (which sbatch blanks out of any `#SBATCH` line).

    Inside the quotes `"`, `'`, `\\` and `#` are escaped with a backslash, and so is the `j` of
    hetjob / packjob; sbatch removes the quotes and escapes again (src/sbatch/opt.c).
    """
    name, sep, value = option.partition("=")
    if not (_SBATCH_SPECIAL.search(value) or _SBATCH_BLANKED.search(value)):
        return option
    escaped = _SBATCH_ESCAPED.sub(r"\\\1", value)
    escaped = _SBATCH_BLANKED.sub(r"\1\\\2", escaped)
    return f'{name}{sep}"{escaped}"'


def run_comment(run_id: str) -> str:
    """The start of the comment of every sbatch job of `run_id` (`k8s_ai:run=<run>`)."""
    return f"k8s_ai:run={quote(run_id, safe='')}"


def batch_job(request: LaunchRequest, config: SlurmConfig) -> BatchJob:
    """The batch job for one step attempt; refuses what an `#SBATCH` line cannot carry."""
    _check_request(request, config)
    spec = request.spec
    job_dir = PurePosixPath(config.workdir, safe_name(request.run_id), safe_name(request.step_key))
    env = dict(request.env)
    env[SLURM_JOB_DIR] = str(job_dir)
    if config.slurm_conf:
        env["SLURM_CONF"] = config.slurm_conf
    bad = sorted(name for name in env if not SHELL_VAR_NAME.match(name))
    if bad:
        raise SubmitError(
            f"step '{request.step_key}': environment variable names {bad} cannot be exported "
            "by a batch script; use letters, digits and '_'"
        )
    command = list(request.command)
    if not command:
        raise SubmitError(f"step '{request.step_key}': empty command")
    if config.python and not request.raw_command:
        command[0] = config.python
    comment = ",".join(
        (
            run_comment(request.run_id),
            f"step={quote(request.step_key, safe='')}",
            f"attempt={request.attempt}",
        )
    )
    return BatchJob(
        name=f"k8sai.{_UNSAFE.sub('_', request.run_id)[:8]}.{safe_name(request.step_key)}",
        comment=comment,
        nodes=spec.nodes,
        tasks_per_node=spec.tasks_per_node,
        cpus_per_task=max(1, math.ceil(spec.cpu)),
        memory_mb=max(1, math.ceil(spec.memory_bytes / MiB)),
        gpus_per_node=spec.gpu,
        gpu_type=_gpu_type(request),
        partition=config.partition,
        account=config.account,
        time_limit_min=config.time_limit_minutes(),
        signal_lead_s=int(config.grace_period_s),
        self_signal_after_s=_self_signal_after(config),
        requeue=spec.preemptible,
        job_dir=str(job_dir),
        output_path=str(job_dir / f"attempt-{request.attempt}.log"),
        env=tuple(sorted(env.items())),
        command=tuple(command),
    )


def _check_request(request: LaunchRequest, config: SlurmConfig) -> None:
    """What the config and the step's tags must satisfy before a script is written."""
    where = f"step '{request.step_key}'"
    check_header_values(
        {
            "gpu_type": request.spec.gpu_type,
            "slurm.partition": config.partition,
            "slurm.account": config.account,
            "slurm.workdir": config.workdir,
        },
        where,
    )
    if "\\" in config.workdir:
        raise SubmitError(
            f"{where}: slurm.workdir={config.workdir!r} contains a backslash, which Slurm "
            "removes from --output paths (the log would land elsewhere); use a path without '\\'"
        )


def _gpu_type(request: LaunchRequest) -> str | None:
    gpu_type = request.spec.gpu_type
    if gpu_type is not None and not _GRES_TYPE.match(gpu_type):
        raise SubmitError(
            f"step '{request.step_key}': gpu_type={gpu_type!r} is not a Slurm GRES type; "
            "use the type name from the cluster's gres.conf (letters, digits, '_', '.', '-')"
        )
    return gpu_type


def _self_signal_after(config: SlurmConfig) -> int | None:
    limit = config.time_limit_minutes()
    if config.transport != "rest" or limit is None:
        return None
    return max(1, limit * 60 - int(config.grace_period_s))


# The body after the exports. The step process runs in the background so that the USR2 trap
# runs while it works; `wait` returns early (status > 128) whenever a trapped signal arrives.
# After USR2 a preemptible step has half the grace period to save its checkpoint; unless it
# finished successfully by then, the job is requeued (which stops the step if still running).
# A step process that exits 0 although the step failed (Dagster's does, after recording the
# failure) leaves the failed-marker file behind (Gang.run writes it when a rank failed); the job
# then exits 1, so that sacct shows FAILED rather than COMPLETED.
_BODY = """\
rm -f -- "$k8s_ai_failed"
k8s_ai_usr2=0
k8s_ai_step=""
trap 'k8s_ai_usr2=1; kill -USR2 "$k8s_ai_step" 2>/dev/null' USR2
trap 'kill -TERM "$k8s_ai_step" 2>/dev/null' TERM
{timer}{command} &
k8s_ai_step=$!
while :; do
    wait "$k8s_ai_step"
    k8s_ai_rc=$?
    if [ "$k8s_ai_rc" -le 128 ] || ! kill -0 "$k8s_ai_step" 2>/dev/null; then
        break
    fi
    if [ "$k8s_ai_usr2" = 1 ] && [ "$k8s_ai_requeue" = 1 ]; then
        k8s_ai_deadline=$((SECONDS + k8s_ai_save_s))
        while kill -0 "$k8s_ai_step" 2>/dev/null && [ "$SECONDS" -lt "$k8s_ai_deadline" ]; do
            sleep 0.2
        done
        kill -0 "$k8s_ai_step" 2>/dev/null || {{ wait "$k8s_ai_step"; k8s_ai_rc=$?; }}
        break
    fi
done
if [ "$k8s_ai_usr2" = 1 ] && [ "$k8s_ai_requeue" = 1 ] && [ "$k8s_ai_rc" != 0 ]; then
    echo "k8s_ai: requeueing job $SLURM_JOB_ID after the checkpoint window" >&2
    scontrol requeue "$SLURM_JOB_ID"
fi
if [ "$k8s_ai_rc" = 0 ] && [ -e "$k8s_ai_failed" ]; then
    echo "k8s_ai: $(head -c 2000 "$k8s_ai_failed"); the job exits 1" >&2
    k8s_ai_rc=1
fi
exit "$k8s_ai_rc"
"""


def render_script(job: BatchJob) -> str:
    """The bash batch script: `#SBATCH` options, exports, then the supervised step process."""
    lines = ["#!/bin/bash"]
    lines += [f"#SBATCH {option}" for option in job.directives()]
    lines.append("set -u")
    lines += [f"export {name}={shlex.quote(value)}" for name, value in job.env]
    lines.append(f"k8s_ai_requeue={1 if job.requeue else 0}")
    lines.append(f"k8s_ai_save_s={max(1, job.signal_lead_s // 2)}")
    marker = PurePosixPath(job.job_dir, SLURM_FAILED_MARKER)
    lines.append(f"k8s_ai_failed={shlex.quote(str(marker))}")
    timer = ""
    if job.self_signal_after_s is not None:
        timer = f"(sleep {job.self_signal_after_s}; kill -USR2 $$) &\n"
    return "\n".join(lines) + "\n" + _BODY.format(command=shlex.join(job.command), timer=timer)


def rest_job_properties(job: BatchJob, base_env: Mapping[str, str]) -> dict[str, Any]:
    """The slurmrestd `job` object equivalent to the script's `#SBATCH` lines."""
    props: dict[str, Any] = {
        "name": job.name,
        "comment": job.comment,
        "nodes": [job.nodes, job.nodes],
        "tasks": job.nodes * job.tasks_per_node,
        "tasks_per_node": job.tasks_per_node,
        "cpus_per_task": job.cpus_per_task,
        "memory_per_node": job.memory_mb,
        "requeue": job.requeue,
        "open_mode": "append",
        "standard_output": job.output_path,
        "standard_error": job.output_path,
        "current_working_directory": job.job_dir,
        "environment": dict(base_env),
    }
    if job.gres:
        props["gres"] = job.gres
    if job.partition:
        props["partition"] = job.partition
    if job.account:
        props["account"] = job.account
    if job.time_limit_min:
        props["time_limit"] = job.time_limit_min
    return props
