"""slurmrestd's OpenAPI data-parser versions: which one to use, and the payload shapes of each.

Pure functions over plain JSON values; `rest.py` does the HTTP. Fields read and written:

- the server's OpenAPI description (`GET /openapi/v3`): the `/slurm/<version>/...` path keys,
  and whether `/slurmdb/<version>/job/{job_id}` is among them (accounting: `accounting.py`);
- the job description (`POST job/submit`): v0.0.38 takes the script beside `job`, `nodes` as
  `[min, max]`, `environment` as an object, `gres`, plain integers; v0.0.40 and later take the
  script inside `job`, `nodes` as "2" or "1-3", `environment` as "K=V" strings, GRES as
  `tres_per_node` ("gres/gpu:2"), `open_mode` as a list of flags, and numbers that may be unset
  or infinite as `{set, infinite, number}`;
- a job (`GET job/<id>`, `GET jobs`): `job_state` a string (v0.0.38) or a list whose first item
  is the base state and the rest flags (["CANCELLED", "COMPLETING"]); `exit_code` the raw wait
  status (v0.0.38) or `{status, return_code, signal: {id, name}}`; `start_time`/`end_time`
  integers or `{set, infinite, number}`; `comment` a string or `{job, administrator, system}`;
  `nodes`, `batch_host`, `state_reason`, `restart_cnt`, `tres_alloc_str`, `standard_output`,
  and `tres_per_node` for the GPUs (24.11 without slurmdbd leaves them out of `tres_alloc_str`);
- a partition (`GET partition/<name>`): `nodes` a host list (v0.0.38) or `{configured, ...}`;
  the default partition is flagged `default` in v0.0.38 only.

Example:
    >>> newest_known(("v0.0.40", "v0.0.41", "v0.0.42", "v0.0.99"))
    'v0.0.42'
    >>> submit_body("v0.0.42", {"nodes": [2, 2], "environment": {"A": "1"}}, "#!/bin/bash")
    {'job': {'nodes': '2', 'environment': ['A=1'], 'script': '#!/bin/bash'}}
    >>> job_state({"job_state": ["CANCELLED", "COMPLETING"]})
    'CANCELLED'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...errors import ConfigError
from .states import PENDING_STATES, JobInfo, expand_hostlist, job_gpus, parse_tres

# The data-parser versions this library speaks, oldest first: v0.0.38 is Slurm 22.05's,
# v0.0.40-v0.0.42 are Slurm 24.11's (23.02's v0.0.39 is not tested here, so not chosen).
KNOWN_VERSIONS = ("v0.0.38", "v0.0.40", "v0.0.41", "v0.0.42")
LEGACY_VERSIONS = frozenset({"v0.0.38"})  # the flat payload shapes

_VERSION_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")

# States of a job that still holds or waits for resources (`run_jobs` lists these).
LIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "SUSPENDED", "REQUEUED", "CONFIGURING", "COMPLETING"}
)


def served_versions(description: Mapping[str, Any]) -> tuple[str, ...]:
    """The `/slurm/<version>/` data-parser versions an OpenAPI description lists, sorted.

    Example:
        >>> served_versions({"paths": {"/slurm/v0.0.41/jobs/": {}, "/slurm/v0.0.40/ping/": {},
        ...                            "/slurmdb/v0.0.41/jobs/": {}}})
        ('v0.0.40', 'v0.0.41')
    """
    found = {m.group(1) for m in map(_VERSION_PATH.match, description.get("paths") or {}) if m}
    return tuple(sorted(found, key=_version_key))


def serves_accounting(description: Mapping[str, Any], version: str) -> bool:
    """Whether the server offers `version`'s accounting endpoint for one job (slurmdbd's
    `/slurmdb/<version>/job/{job_id}`: only with slurmdbd and its openapi plugin).

    Example:
        >>> serves_accounting({"paths": {"/slurmdb/v0.0.42/job/{job_id}": {}}}, "v0.0.42")
        True
    """
    return f"/slurmdb/{version}/job/{{job_id}}" in (description.get("paths") or {})


def newest_known(served: Iterable[str]) -> str | None:
    """The newest version both the server serves and this library knows, or None."""
    common = set(served) & set(KNOWN_VERSIONS)
    return max(common, key=_version_key) if common else None


def choose_version(served: tuple[str, ...], wanted: str | None, server: str) -> str:
    """`wanted` (slurm.rest_api_version) when the server serves it, else the newest known one;
    a `ConfigError` naming what the server serves when there is none to use.

    Example:
        >>> choose_version(("v0.0.38",), None, "http://h:6820")
        'v0.0.38'
        >>> choose_version(("v0.0.40", "v0.0.42"), "v0.0.38", "http://h:6820")
        Traceback (most recent call last):
        k8s_ai_orchestrator.errors.ConfigError: slurm.rest_api_version='v0.0.38' is not served \
by slurmrestd at http://h:6820, which serves v0.0.40, v0.0.42; remove rest_api_version to use \
the newest this library knows (v0.0.38, v0.0.40, v0.0.41, v0.0.42) or set one it serves
    """
    offered = ", ".join(served) or "none"
    if wanted is not None and wanted not in served:
        raise ConfigError(
            f"slurm.rest_api_version={wanted!r} is not served by slurmrestd at {server}, which "
            f"serves {offered}; remove rest_api_version to use the newest this library knows "
            f"({', '.join(KNOWN_VERSIONS)}) or set one it serves"
        )
    chosen = wanted or newest_known(served)
    if chosen is None:
        raise ConfigError(
            f"slurmrestd at {server} serves {offered}, none of which this library knows "
            f"({', '.join(KNOWN_VERSIONS)}); start slurmrestd with one of these data parsers "
            "(`slurmrestd -d v0.0.42 ...`)"
        )
    return chosen


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.lstrip("v").split("."))


# -- job description ---------------------------------------------------------------------------


def _number(value: int) -> dict[str, Any]:
    return {"set": True, "infinite": False, "number": value}


def _node_range(value: list[int]) -> str:
    low, high = value
    return str(low) if low == high else f"{low}-{high}"


# How v0.0.40+ writes a field of the v0.0.38 job description: name → (new name, encoder).
NEW_JOB_FIELDS: Mapping[str, tuple[str, Callable[[Any], Any]]] = {
    "nodes": ("nodes", _node_range),
    "memory_per_node": ("memory_per_node", _number),
    "time_limit": ("time_limit", _number),
    "open_mode": ("open_mode", lambda mode: [str(mode).upper()]),
    "environment": ("environment", lambda env: [f"{k}={v}" for k, v in env.items()]),
    "gres": ("tres_per_node", lambda gres: f"gres/{gres}"),
}


def submit_body(version: str, job: Mapping[str, Any], script: str) -> dict[str, Any]:
    """The `job/submit` body for `version` from a v0.0.38 job description and its script."""
    if version in LEGACY_VERSIONS:
        return {"script": script, "job": dict(job)}
    converted: dict[str, Any] = {}
    for name, value in job.items():
        new_name, encode = NEW_JOB_FIELDS.get(name, (name, _same))
        converted[new_name] = encode(value)
    converted["script"] = script
    return {"job": converted}


def _same(value: Any) -> Any:
    return value


# -- answers -----------------------------------------------------------------------------------


def number(value: Any) -> int | None:
    """An integer as any version writes it: 7, or {set, infinite, number} (None when unset or
    infinite).

    Example:
        >>> number(7), number({"set": True, "infinite": False, "number": 7})
        (7, 7)
        >>> number({"set": False, "infinite": False, "number": 0}) is None
        True
    """
    if isinstance(value, Mapping):
        if not value.get("set") or value.get("infinite"):
            return None
        value = value.get("number")
    return int(value) if isinstance(value, int | float) else None


def job_state(row: Mapping[str, Any]) -> str:
    """A job's base state: the string, or the first item of the list of state and flags."""
    state = row.get("job_state")
    return str(state[0] if isinstance(state, list) and state else state or "UNKNOWN")


def job_comment(row: Mapping[str, Any]) -> str:
    """A job's comment: a string, or {job, administrator, system}."""
    comment = row.get("comment")
    return str(comment.get("job") or "") if isinstance(comment, Mapping) else str(comment or "")


def exit_status(value: Any) -> tuple[int | None, int | None]:
    """(exit code, signal) of a job: v0.0.38's raw wait status (the code in the high byte) or
    v0.0.40+'s {status, return_code, signal: {id, name}}.

    Example:
        >>> exit_status(768)
        (3, None)
        >>> exit_status({"status": ["SIGNALED"], "return_code": {"set": False},
        ...              "signal": {"id": {"set": True, "number": 9}, "name": "KILL"}})
        (0, 9)
    """
    if isinstance(value, int):
        return (value >> 8 if value > 255 else value), None
    if not isinstance(value, Mapping):
        return None, None
    signal = number((value.get("signal") or {}).get("id"))
    code = number(value.get("return_code"))
    return (0 if code is None and signal else code), signal or None


def job_info(row: Mapping[str, Any], job_id: str) -> JobInfo:
    """One job of `GET job/<id>` (any version) → JobInfo."""
    cpus, memory_mb, gpus = parse_tres(str(row.get("tres_alloc_str") or ""))
    state = job_state(row)
    started = number(row.get("start_time"))
    ended = number(row.get("end_time"))
    exit_code, signal = exit_status(row.get("exit_code"))
    unfinished = state in PENDING_STATES or state in LIVE_STATES
    nodes = expand_hostlist(str(row.get("nodes") or ""))
    return JobInfo(
        job_id=str(row.get("job_id", job_id)),
        state=state,
        reason=str(row.get("state_reason") or ""),
        exit_code=exit_code,
        signal=signal,
        nodes=nodes,
        batch_host=row.get("batch_host") or None,
        start_time=float(started) if started and state != "PENDING" else None,
        end_time=float(ended) if ended and not unfinished else None,
        submit_time=float(submitted) if (submitted := number(row.get("submit_time"))) else None,
        restarts=int(row.get("restart_cnt") or 0),
        cpus=cpus,
        memory_mb=memory_mb,
        gpus=job_gpus(gpus, str(row.get("tres_per_node") or ""), len(nodes)),
        output_path=row.get("standard_output") or None,
    )


def partition_nodes(row: Mapping[str, Any]) -> tuple[str, ...]:
    """The nodes of a partition: a host list, or {configured, ...}."""
    nodes = row.get("nodes")
    text = nodes.get("configured") if isinstance(nodes, Mapping) else nodes
    return expand_hostlist(str(text or ""))


def is_default_partition(row: Mapping[str, Any]) -> bool:
    """Whether the partition is flagged default (v0.0.38 only; later versions do not say)."""
    return "default" in [str(flag).lower() for flag in row.get("flags") or []]
