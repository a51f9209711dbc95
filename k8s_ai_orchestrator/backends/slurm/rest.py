"""The `rest` transport: slurmrestd's OpenAPI with JWT authentication.

The first call reads the server's OpenAPI description (`/openapi/v3`) and uses the newest
data-parser version both it and this library know (`openapi.py`: v0.0.38 of Slurm 22.05 up to
v0.0.42 of Slurm 24.11); `slurm.rest_api_version` pins one, refused with a `ConfigError` when
the server does not serve it. HTTP goes through an `HttpCall` passed in by the caller; the
default uses `urllib`. A job gets the same environment as with the CLI transport
(`config.job_environment`). A finished job's peak RSS and CPU time come from slurmdbd's
`/slurmdb/<version>/job/<id>` when the server serves it; a running job's RSS is not available
(slurmrestd has no `sstat`).

Example:
    >>> config = SlurmConfig(transport="rest", rest_url="http://h:6820", rest_user="u",
    ...                      rest_token="t", rest_api_version="v0.0.42")
    >>> description = b'{"paths": {"/slurm/v0.0.42/job/{job_id}": {}}}'
    >>> RestTransport(config, lambda *call: (200, description)).url("job/7")
    'http://h:6820/slurm/v0.0.42/job/7'
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import BackendError, SubmitError
from . import accounting, openapi
from .cli import NodeLimits, _gpus, matching_job, of_run
from .config import SlurmConfig, job_environment
from .script import BatchJob, rest_job_properties
from .states import JobInfo

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
        self._version: str | None = None
        self._accounting = False  # the server serves /slurmdb/<version>/job/{job_id}

    @property
    def version(self) -> str:
        """The data-parser version in use, found from the server's OpenAPI description once."""
        if self._version is None:
            status, data = self._call("GET", "openapi/v3", path_url=self._base() + "/openapi/v3")
            if status != 200:
                raise BackendError(
                    f"slurmrestd at {self.config.rest_url} did not give its OpenAPI description "
                    f"(/openapi/v3: HTTP {status})",
                    transient=status in TRANSIENT_STATUSES,
                )
            served = openapi.served_versions(data)
            self._version = openapi.choose_version(
                served, self.config.rest_api_version, self._base()
            )
            self._accounting = openapi.serves_accounting(data, self._version)
        return self._version

    def _base(self) -> str:
        return (self.config.rest_url or "").rstrip("/")

    def url(self, path: str) -> str:
        return f"{self._base()}/slurm/{self.version}/{path}"

    def _call(
        self, method: str, path: str, payload: Any = None, *, path_url: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {
            "X-SLURM-USER-NAME": self.config.rest_user or "",
            "X-SLURM-USER-TOKEN": self.config.rest_token or "",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        body = json.dumps(payload).encode() if payload is not None else None
        try:
            status, raw = self._http(
                method, path_url or self.url(path), headers, body, self.config.command_timeout_s
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
        payload = openapi.submit_body(self.version, rest_job_properties(job, env), script)
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
        live = openapi.LIVE_STATES
        return of_run(self._rows(lambda row: openapi.job_state(row) in live), run_id)

    def _rows(self, keep: Callable[[Mapping[str, Any]], bool]) -> list[str]:
        """`id|comment` of the jobs slurmctld knows that `keep` keeps (as `squeue` prints)."""
        status, data = self._call("GET", "jobs")
        if status != 200:
            raise BackendError(f"slurmrestd jobs: {_errors(data)}", transient=True)
        return [
            f"{row.get('job_id')}|{openapi.job_comment(row)}"
            for row in data.get("jobs") or []
            if keep(row)
        ]

    def job_info(self, job_id: str) -> JobInfo | None:
        status, data = self._call("GET", f"job/{job_id}")
        jobs = data.get("jobs") or []
        if not jobs:
            if status == 200 or "Invalid job id" in _errors(data):
                return None
            raise BackendError(f"slurmrestd job/{job_id}: {_errors(data)}", transient=True)
        return openapi.job_info(jobs[0], job_id)

    def cancel(self, job_id: str) -> None:
        status, data = self._call("DELETE", f"job/{job_id}")
        if status != 200 and "Invalid job id" not in _errors(data):
            raise BackendError(f"slurmrestd cancel {job_id}: {_errors(data)}", transient=True)

    def max_rss_bytes(self, job_id: str) -> int | None:
        """None: slurmrestd has no `sstat` (a running step's RSS); `measured` reads the
        finished steps' from slurmdbd."""
        return None

    def measured(self, job_id: str) -> accounting.Measured | None:
        """A finished job's peak RSS and CPU time from slurmdbd (`/slurmdb/<version>/job/<id>`,
        every run of a requeued job); None when slurmrestd serves no accounting (no slurmdbd)
        or slurmdbd has no record yet."""
        version = self.version
        if not self._accounting:
            return None
        path = f"slurmdb/{version}/job/{job_id}"
        status, data = self._call("GET", path, path_url=f"{self._base()}/{path}")
        if status != 200:
            return None
        return accounting.from_slurmdb_jobs(data.get("jobs") or [])

    def limits(self, partition: str | None) -> NodeLimits:
        _, data = self._call("GET", f"partition/{partition}" if partition else "partitions")
        rows = data.get("partitions") or []
        if partition is None:
            rows = [row for row in rows if openapi.is_default_partition(row)] or rows[:1]
        if not rows:
            raise SubmitError(
                f"Slurm partition {partition or '(default)'} not found: {_errors(data)}; "
                "set slurm.partition to one listed by `sinfo -s`"
            )
        names = openapi.partition_nodes(rows[0])
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


def _errors(data: Mapping[str, Any]) -> str:
    errors = data.get("errors") or []
    return (
        "; ".join(str(e.get("error") or e.get("description") or e) for e in errors) or "no detail"
    )
