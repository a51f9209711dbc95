"""`SlurmConfig`: how the executor reaches Slurm. Its field names are the executor's
`slurm:` config keys.

Example:
    >>> SlurmConfig(partition="gpu", workdir="/shared/k8s_ai").transport
    'cli'
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ...errors import ConfigError, config_number

TRANSPORTS = ("cli", "rest")
_SLURM_WORD = re.compile(r"^[A-Za-z0-9_.,+-]+\Z")
_SSH_HOST = re.compile(r"^(?:[A-Za-z0-9_.][A-Za-z0-9_.+-]*@)?[A-Za-z0-9_\[][A-Za-z0-9_.:\[\]-]*\Z")
# a shell variable name (exported bash functions are not variables)
SHELL_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_TIME_LIMIT = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


@dataclass(frozen=True)
class SlurmConfig:
    """Where and how gang steps are submitted.

    Example:
        >>> config = SlurmConfig(
        ...     transport="rest", rest_url="http://slurm:6820", rest_user="ml", rest_token="jwt"
        ... )
        >>> config.rest_url
        'http://slurm:6820'
    """

    transport: str = "cli"  # "cli": sbatch/squeue/scontrol/scancel; "rest": slurmrestd with JWT
    partition: str | None = None  # None = the cluster's default partition
    account: str | None = None  # --account for every job
    python: str | None = None  # interpreter on compute nodes; None = the step command's argv[0]
    workdir: str = "/tmp/k8s_ai_slurm"  # directory shared by the submitting host and all nodes
    ssh_host: str | None = None  # run the CLI on this login node over ssh (cli transport)
    rest_url: str | None = None  # slurmrestd base URL, e.g. "http://slurm-login:6820"
    rest_user: str | None = None  # X-SLURM-USER-NAME
    rest_token: str | None = field(default=None, repr=False)  # X-SLURM-USER-TOKEN
    rest_token_env: str | None = None  # environment variable rest_token was read from
    time_limit: int | str | None = None  # minutes, or Slurm's "D-HH:MM:SS"; None = partition's
    grace_period_s: int = 30  # USR2 this long before the time limit: checkpoint (and requeue)
    slurm_conf: str | None = None  # SLURM_CONF for the CLI and the job; None = Slurm's default
    command_timeout_s: float = 30.0  # bound on every sbatch/squeue/scontrol/HTTP call
    # slurmrestd data-parser version ("v0.0.42"); None: the newest the server and we both know
    rest_api_version: str | None = None

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ConfigError(
                f"slurm.transport={self.transport!r} is not allowed: use 'cli' or 'rest'"
            )
        for name in ("partition", "account"):
            value = getattr(self, name)
            if value is not None and not _SLURM_WORD.match(value):
                raise ConfigError(
                    f"slurm.{name}={value!r} is not a Slurm name: use letters, digits, '_', "
                    "'.', '-', ','"
                )
        if not self.workdir.startswith("/") or re.search(r"[\s%\\\x00-\x1f\x7f]", self.workdir):
            raise ConfigError(
                f"slurm.workdir={self.workdir!r} must be an absolute path without whitespace, "
                "control characters, '%' or '\\' (sbatch cannot carry them in --output) on a "
                "filesystem every node mounts: set it to e.g. /shared/k8s_ai"
            )
        if self.ssh_host and not _SSH_HOST.match(self.ssh_host):
            why = "is not a host name"
            if self.ssh_host.startswith("-"):
                why = "starts with '-', so ssh would read it as an option"
            raise ConfigError(
                f"slurm.ssh_host={self.ssh_host!r} {why}: use [user@]host with letters, "
                "digits, '.', '_', '-' (not first), ':' or '[]' (an IPv6 address)"
            )
        if self.transport == "rest" and not (self.rest_url and self.rest_user and self.rest_token):
            raise ConfigError(
                "slurm.transport='rest' needs rest_url, rest_user and rest_token, the token "
                "from an environment variable: rest_token: {env: SLURM_JWT} or "
                "rest_token_env: SLURM_JWT (create it with `scontrol token username=<user>`)"
            )
        config_number(self.command_timeout_s, "slurm.command_timeout_s", above=True)
        self._check_grace_period()

    def _check_grace_period(self) -> None:
        grace, limit = self.grace_period_s, self.time_limit_minutes()
        if (
            isinstance(grace, bool)
            or not isinstance(grace, int | float)
            or not math.isfinite(grace)
            or grace < 0
        ):
            raise ConfigError(
                f"slurm.grace_period_s={grace!r} is not allowed: give a number of seconds >= 0 "
                "(USR2 this long before the time limit)"
            )
        if limit is not None and grace >= limit * 60:
            raise ConfigError(
                f"slurm.grace_period_s={grace!r} must be shorter than slurm.time_limit="
                f"{self.time_limit!r} ({limit * 60}s), or the job signals itself to checkpoint "
                "as soon as it starts and a preemptible step requeues forever; lower "
                "grace_period_s or raise time_limit"
            )

    def time_limit_minutes(self) -> int | None:
        """`time_limit` in whole minutes (rounded up), or None for the partition default.

        Example:
            >>> SlurmConfig(time_limit="1-02:30:00").time_limit_minutes()
            1590
        """
        if self.time_limit is None:
            return None
        minutes = 0
        if isinstance(self.time_limit, int) and not isinstance(self.time_limit, bool):
            minutes = self.time_limit
        elif isinstance(self.time_limit, str):
            match = _TIME_LIMIT.match(self.time_limit.strip())
            if match:
                minutes = _minutes(*match.groups(), has_days=match.group(1) is not None)
        if minutes > 0:
            return minutes
        raise ConfigError(
            f"slurm.time_limit={self.time_limit!r} is not allowed: it must be at least one "
            'minute, given as minutes (120) or "D-HH:MM:SS" / "HH:MM:SS" / "MM"; set it to e.g. '
            "120, or remove it to use the partition's default"
        )


def _minutes(
    days: str | None, first: str, second: str | None, third: str | None, *, has_days: bool
) -> int:
    numbers = [int(part) for part in (first, second, third) if part is not None]
    if has_days:  # D-HH, D-HH:MM, D-HH:MM:SS
        hours, minutes, seconds = (numbers + [0, 0])[:3]
        total = int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds
    elif len(numbers) == 1:  # MM
        total = numbers[0] * 60
    elif len(numbers) == 2:  # MM:SS
        total = numbers[0] * 60 + numbers[1]
    else:  # HH:MM:SS
        total = numbers[0] * 3600 + numbers[1] * 60 + numbers[2]
    return -(-total // 60)


def config_from_mapping(raw: Mapping[str, Any] | None) -> SlurmConfig:
    """`SlurmConfig` from the executor's `slurm:` mapping; unknown keys are refused.

    The REST token is read from the environment variable named by `rest_token: {env: VAR}`
    or `rest_token_env: VAR`. The executor's config schema refuses a literal token (run
    config is stored by Dagster); from Python, a string is used as it is.

    Example:
        >>> config_from_mapping({"transport": "cli", "partition": "gpu"}).partition
        'gpu'
    """
    values = dict(raw or {})
    allowed = [f.name for f in fields(SlurmConfig)]
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise ConfigError(
            f"executor config: unknown slurm keys {unknown}; allowed: {', '.join(allowed)}"
        )
    token = values.pop("rest_token", None)
    env_name = values.pop("rest_token_env", None)
    if isinstance(token, str):  # from Python; the executor's schema refuses a literal token
        return SlurmConfig(**values, rest_token=token)
    if token is not None and not (isinstance(token, Mapping) and set(token) == {"env"}):
        raise ConfigError(
            f"slurm.rest_token must be {{env: VAR}}, got a {type(token).__name__}: put the token "
            "in an environment variable of the run worker and write rest_token: {env: SLURM_JWT}"
        )
    if token is not None and env_name is not None:
        raise ConfigError("slurm: give rest_token: {env: VAR} or rest_token_env: VAR, not both")
    env_name = token["env"] if token is not None else env_name
    if env_name is not None:
        values["rest_token"] = _token_from_env(env_name)
    return SlurmConfig(**values, rest_token_env=env_name)


def _token_from_env(name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigError(
            f"slurm.rest_token_env={name!r} is not allowed: give the name of an environment "
            "variable, e.g. SLURM_JWT"
        )
    value = os.environ.get(name)
    if not value:
        raise ConfigError(
            f"slurm.rest_token: environment variable {name} is not set or empty in the run "
            f"worker; export {name}=$(scontrol token username=<user> | cut -d= -f2) where the "
            "run starts (a Kubernetes Secret or your process manager's environment)"
        )
    return value


# Names of environment variables that hold secrets: never forwarded to a Slurm job.
SECRET_NAME = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|API_KEY|ACCESS_KEY|JWT", re.IGNORECASE
)


def job_environment(
    environ: Mapping[str, str], config: SlurmConfig | None = None
) -> dict[str, str]:
    """The submitting process's variables a Slurm job gets, with either transport: all of
    them except those whose name says they hold a secret (and the REST token's variable)
    and names that are not shell variable names.

    Example:
        >>> job_environment({"PATH": "/usr/bin", "SLURM_JWT": "x", "HF_TOKEN": "y"})
        {'PATH': '/usr/bin'}
    """
    token_var = config.rest_token_env if config is not None else None
    return {
        name: value
        for name, value in environ.items()
        if SHELL_VAR_NAME.match(name) and not SECRET_NAME.search(name) and name != token_var
    }
