"""The `rest` transport: slurmrestd's OpenAPI (v0.0.38) with JWT authentication.

HTTP goes through an `HttpCall` passed in by the caller; the default uses `urllib`. A job gets
the same environment as with the CLI transport (`config.job_environment`).

Example:
    >>> config = SlurmConfig(transport="rest", rest_url="http://h:6820", rest_user="u",
    ...                      rest_token="t")
    >>> RestTransport(config).url("job/7")
    'http://h:6820/slurm/v0.0.38/job/7'
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import BackendError, SubmitError
from .cli import NodeLimits, _gpus, matching_job, of_run
from .config import SlurmConfig, job_environment
from .script import BatchJob, rest_job_properties
from .states import JobInfo, expand_hostlist, parse_tres

# (method, url, headers, body or None, timeout seconds) → (HTTP status, response body)
HttpCall = Callable[[str, str, Mapping[str, str], bytes | None, float], tuple[int, bytes]]

# Transient HTTP statuses: slurmrestd or slurmctld busy or restarting.
TRANSIENT_STATUSES = frozenset({429, 500, 502, 503, 504})


def urllib_http(
    method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout_s: float
) -> tuple[int, bytes]:
    """The default `HttpCall`."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers))
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


class RestTransport:
    """Talk to Slurm through slurmrestd."""

    def __init__(self, config: SlurmConfig, http: HttpCall | None = None) -> None:
        self.config = config
        self._http = http or urllib_http

    def url(self, path: str) -> str:
        base = (self.config.rest_url or "").rstrip("/")
        return f"{base}/slurm/{self.config.rest_api_version}/{path}"

    def _call(self, method: str, path: str, payload: Any = None) -> tuple[int, dict[str, Any]]:
        headers = {
            "X-SLURM-USER-NAME": self.config.rest_user or "",
            "X-SLURM-USER-TOKEN": self.config.rest_token or "",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        body = json.dumps(payload).encode() if payload is not None else None
        try:
            status, raw = self._http(
                method, self.url(path), headers, body, self.config.command_timeout_s
            )
        except OSError as exc:
            raise BackendError(
                f"slurmrestd at {self.config.rest_url} unreachable: {exc}", transient=True
            ) from exc
        if status in (401, 403):
            raise BackendError(
                f"slurmrestd refused {method} {path} ({status}): renew slurm.rest_token with "
                f"`scontrol token username={self.config.rest_user}`"
            )
        if status in TRANSIENT_STATUSES and status != 500:
            raise BackendError(f"slurmrestd {method} {path}: HTTP {status}", transient=True)
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            raise BackendError(f"slurmrestd {method} {path}: not JSON (HTTP {status})") from None
        return status, data

    def prepare_dir(self, path: str) -> None:
        """Create the attempt's directory (the workdir is shared with this host)."""
        os.makedirs(path, exist_ok=True)

    def submit(self, job: BatchJob, script: str, step_key: str) -> str:
        env = job_environment(os.environ, self.config)
        env.setdefault("PATH", "/usr/bin:/bin")
        if self.config.slurm_conf:
            env["SLURM_CONF"] = self.config.slurm_conf
        payload = {"script": script, "job": rest_job_properties(job, env)}
        status, data = self._call("POST", "job/submit", payload)
        if status != 200 or data.get("errors") or "job_id" not in data:
            raise SubmitError(
                f"step '{step_key}': slurmrestd refused the job: {_errors(data)}; "
                "check the partition, account and sizes in the executor's slurm config"
            )
        return str(data["job_id"])

    def find(self, job: BatchJob) -> str | None:
        """The id of the job slurmctld still knows with `job`'s name and comment, or None."""
        return matching_job(self._rows(lambda row: row.get("name") == job.name), job.comment)

    def run_jobs(self, run_id: str) -> list[str]:
        """The ids of the pending and running jobs of `run_id` (their comment names it)."""
        return of_run(self._rows(lambda row: _state(row) in LIVE_STATES), run_id)

    def _rows(self, keep: Callable[[Mapping[str, Any]], bool]) -> list[str]:
        """`id|comment` of the jobs slurmctld knows that `keep` keeps (as `squeue` prints)."""
        status, data = self._call("GET", "jobs")
        if status != 200:
            raise BackendError(f"slurmrestd jobs: {_errors(data)}", transient=True)
        return [
            f"{row.get('job_id')}|{_comment(row)}" for row in data.get("jobs") or [] if keep(row)
        ]

    def job_info(self, job_id: str) -> JobInfo | None:
        status, data = self._call("GET", f"job/{job_id}")
        jobs = data.get("jobs") or []
        if not jobs:
            if status == 200 or "Invalid job id" in _errors(data):
                return None
            raise BackendError(f"slurmrestd job/{job_id}: {_errors(data)}", transient=True)
        job = jobs[0]
        cpus, memory_mb, gpus = parse_tres(str(job.get("tres_alloc_str") or ""))
        started = int(job.get("start_time") or 0)
        ended = int(job.get("end_time") or 0)
        state = str(job.get("job_state", "UNKNOWN"))
        running_or_pending = state in ("PENDING", "RUNNING", "REQUEUED", "COMPLETING")
        return JobInfo(
            job_id=str(job.get("job_id", job_id)),
            state=state,
            reason=str(job.get("state_reason") or ""),
            exit_code=_exit_code(job.get("exit_code")),
            nodes=expand_hostlist(str(job.get("nodes") or "")),
            batch_host=job.get("batch_host") or None,
            start_time=float(started) if started and state != "PENDING" else None,
            end_time=float(ended) if ended and not running_or_pending else None,
            restarts=int(job.get("restart_cnt") or 0),
            cpus=cpus,
            memory_mb=memory_mb,
            gpus=gpus,
            output_path=job.get("standard_output") or None,
        )

    def cancel(self, job_id: str) -> None:
        status, data = self._call("DELETE", f"job/{job_id}")
        if status != 200 and "Invalid job id" not in _errors(data):
            raise BackendError(f"slurmrestd cancel {job_id}: {_errors(data)}", transient=True)

    def max_rss_bytes(self, job_id: str) -> int | None:
        """Not available from slurmrestd without slurmdbd."""
        return None

    def limits(self, partition: str | None) -> NodeLimits:
        _, data = self._call("GET", f"partition/{partition}" if partition else "partitions")
        rows = data.get("partitions") or []
        if partition is None:
            rows = [row for row in rows if "default" in (row.get("flags") or [])] or rows[:1]
        if not rows:
            raise SubmitError(
                f"Slurm partition {partition or '(default)'} not found: {_errors(data)}; "
                "set slurm.partition to one listed by `sinfo -s`"
            )
        names = expand_hostlist(str(rows[0].get("nodes") or ""))
        _, nodes = self._call("GET", "nodes")
        node_rows = [row for row in nodes.get("nodes") or [] if row.get("name") in names]
        return NodeLimits(
            partition=str(rows[0].get("name", partition or "")),
            nodes=names,
            max_gpus_per_node=max(
                (_gpus(str(row.get("gres", ""))) for row in node_rows), default=0
            ),
            max_cpus_per_node=max((int(row.get("cpus", 0)) for row in node_rows), default=0),
            max_memory_mb_per_node=max(
                (int(row.get("real_memory", 0)) for row in node_rows), default=0
            ),
        )


LIVE_STATES = ("PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "CONFIGURING", "COMPLETING")


def _state(row: Mapping[str, Any]) -> str:
    """A job's state as slurmrestd gives it (a string, or a list of flags in newer versions)."""
    state = row.get("job_state")
    return str(state[0] if isinstance(state, list) and state else state or "")


def _comment(row: Mapping[str, Any]) -> str:
    """A job's comment as slurmrestd gives it (a string, or {job, administrator, system})."""
    comment = row.get("comment")
    return str(comment.get("job") or "") if isinstance(comment, Mapping) else str(comment or "")


def _errors(data: Mapping[str, Any]) -> str:
    errors = data.get("errors") or []
    return (
        "; ".join(str(e.get("error") or e.get("description") or e) for e in errors) or "no detail"
    )


def _exit_code(value: Any) -> int | None:
    """slurmrestd v0.0.38 reports the raw wait status: exit code in the high byte."""
    if isinstance(value, int):
        return value >> 8 if value > 255 else value
    return None
