"""`AICompute`: a Dagster Pipes client that runs a sized program on any backend.

The asset stays light; the heavy program (a training script, a Spark or GDAL job) is launched
as one attempt after another — a local process, a Kubernetes Job in a tenant, or a Slurm job —
with the executor's guarantees: sizes validated before anything is submitted, memory × factor
after an OOM, a relaunch at the same size after a preemption (the program resumes from its
checkpoint), Pending reasons in the run's log, the job cancelled when the run is terminated,
and every attempt's usage as metadata. Only the last attempt's reported results count.

Example:
    >>> from dagster import Definitions, asset
    >>> @asset
    ... def model(context, ai: AICompute):
    ...     return ai.run(context=context, command=["python", "train.py"], cpu=4,
    ...                   memory="16Gi").get_materialize_result()
    >>> defs = Definitions(assets=[model], resources={"ai": AICompute(backend="local")})
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from dagster import (
    ConfigurableResource,
    PipesClient,
    PipesClientCompletedInvocation,
    PipesEnvContextInjector,
    PipesFileMessageReader,
    PipesMessageReader,
    open_pipes_session,
)
from pydantic import Field, PrivateAttr

from ..checkpoint import CheckpointStore
from ..errors import ConfigError
from ..launch.backends import make_backend
from ..launch.plan import plan_step
from ..launch.settings import ExecutorSettings
from ..spec import resolve_spec
from ..tags import TAG_PREFIX
from .attempts import PipesAttempts
from .messages import PodLogMessageReader

CHECKPOINT_EXTRA = "k8s_ai_checkpoint"  # the Pipes extra that names the program's checkpoint
SETTINGS_KEYS = (
    "backend",
    "size_classes",
    "local",
    "kubernetes",
    "slurm",
    "gang_backend",
    "default_tenant",
    "allowed_tenants",
    "oom_escalation",
    "max_preemption_retries",
    "grace_period_s",
    "poll_interval_s",
    "prices",
    "budget",
)


class AICompute(ConfigurableResource, PipesClient):  # type: ignore[misc]
    """Runs an external program through Dagster Pipes where its size says, with relaunches.

    Its config is the `ai_executor`'s (same keys, same rules): define it once and pass it to
    both, e.g. `AICompute(**CONFIG)` and `ai_executor.configured(CONFIG)`. Keys the resource
    has no use for (`max_concurrent`, `tag_concurrency_limits`, `step_dependency_config`,
    `retries`) are left out.

    Example:
        >>> ai = AICompute(backend="local", local={"cpus": 2, "memory": "4Gi"})
        >>> ai.settings().local["cpus"]
        2
    """

    backend: str = Field(default="local", description="local | kubernetes | slurm")
    size_classes: dict[str, dict[str, Any]] | None = Field(
        default=None, description="Size class overrides, {name: {cpu, memory, gpu}}"
    )
    local: dict[str, Any] = Field(default_factory=dict, description="Local capacity")
    kubernetes: dict[str, Any] | None = Field(default=None, description="Tenants, image...")
    slurm: dict[str, Any] | None = Field(default=None, description="Slurm transport, workdir...")
    gang_backend: str | None = Field(
        default=None, description="Where multi-node programs run: slurm | kubernetes | local"
    )
    default_tenant: str | None = None
    allowed_tenants: list[str] | None = None
    oom_escalation: dict[str, Any] = Field(
        default_factory=dict, description="{factor, max_memory, max_attempts}"
    )
    max_preemption_retries: int = 3
    grace_period_s: float = Field(default=30.0, description="SIGTERM → SIGKILL, for the save")
    poll_interval_s: float = Field(default=0.5, description="How often the attempt is checked")
    prices: dict[str, Any] | None = Field(
        default=None, description="{cpu_hour, memory_gib_hour, gpu_hour, ...}: the cost figures"
    )
    budget: dict[str, Any] | None = Field(
        default=None,
        description="{max_cost_per_step, max_gpu_hours_per_step, on_exceeded}: caps on each "
        "program's estimate from its earlier runs, checked before it is submitted, and on what "
        "it has reserved while it runs (on_exceeded: warn | stop)",
    )

    _calls: int = PrivateAttr(default=0)
    _message_files: list[str] = PrivateAttr(default_factory=list)  # local: removed after run

    def settings(self) -> ExecutorSettings:
        """The resource's config as the executor's validated settings (raises `ConfigError`)."""
        raw = {key: getattr(self, key) for key in SETTINGS_KEYS}
        budget = self.budget or {}
        per_run = [key for key in budget if key.endswith("_per_run")]
        if per_run:
            raise ConfigError(
                f"AICompute budget.{per_run[0]}: AICompute checks each program on its own "
                "(max_cost_per_step, max_gpu_hours_per_step); cap a whole run in ai_executor's "
                "budget"
            )
        return ExecutorSettings.from_config({k: v for k, v in raw.items() if v is not None})

    def run(  # type: ignore[override]
        self,
        *,
        context: Any,
        command: Sequence[str],
        extras: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        checkpoints: CheckpointStore | None = None,
        **size: Any,
    ) -> PipesClientCompletedInvocation:
        """Run `command` (argv, run as given) sized by `size`; return the completed invocation.

        Args:
            context: the asset's or op's execution context.
            command: the program's argv, e.g. `[sys.executable, "train.py"]` on the local
                backend or `["python", "/app/train.py"]` in a Kubernetes image.
            extras: Pipes extras handed to the program.
            env: extra environment variables for the program.
            checkpoints: a `CheckpointStore`; the program gets its key's location in the
                extra `k8s_ai_checkpoint` (see docs/pipes-resource.md).
            **size: the fields of `compute(...)`: size, cpu, memory, gpu, gpu_type, nodes,
                tasks_per_node, gpus_per_node, preemptible, backend, tenant, timeout.

        Raises:
            ComputeSpecError, ConfigError, TenantAccessError, SubmitError: refused before
                anything is submitted.
            PipesProgramError: the program failed and is not relaunched.
        """
        op_context = getattr(context, "op_execution_context", context)
        key = self._launch_key(str(op_context.op_handle))
        settings = self.settings()
        given = {name: value for name, value in size.items() if value is not None}
        spec = resolve_spec(given, settings.size_classes, step=key)
        planned = plan_step(settings, key, spec, context.run.tags.get(TAG_PREFIX + "tenant"))
        program_extras = dict(extras or {})
        if checkpoints is not None:
            program_extras[CHECKPOINT_EXTRA] = checkpoints.location(context)
        backend = make_backend(planned.backend, settings)
        try:
            last_save = (lambda: checkpoints.last_saved_at(context)) if checkpoints else None
            attempts = PipesAttempts(
                backend, planned, settings, context, list(command), last_save=last_save
            )
            attempts.validate(dict(env or {}))
            completed = attempts.run(
                lambda reader: open_pipes_session(
                    context=context,
                    context_injector=PipesEnvContextInjector(),
                    message_reader=reader,
                    extras=program_extras,
                ),
                lambda attempt: self._reader(planned.backend, settings, key, attempt),
                dict(env or {}),
            )
            if checkpoints is not None and checkpoints.clear_on_success:
                checkpoints.clear(context)  # finished: never resumed by a later run
            return completed
        finally:
            backend.close()
            for path in self._message_files:
                with contextlib.suppress(OSError):
                    os.remove(path)
            self._message_files.clear()

    def _launch_key(self, step: str) -> str:
        """`<step>-pipes` for the first program a step runs, `<step>-pipes-2` for the next."""
        self._calls += 1
        return f"{step}-pipes" if self._calls == 1 else f"{step}-pipes-{self._calls}"

    def _reader(
        self, backend: str, settings: ExecutorSettings, key: str, attempt: int
    ) -> PipesMessageReader:
        """Where the attempt's Pipes messages come back (see `messages.py`)."""
        if backend == "kubernetes":
            return PodLogMessageReader()
        if backend == "slurm":
            from ..backends.slurm import config_from_mapping

            folder = os.path.join(config_from_mapping(settings.slurm).workdir, "pipes")
            os.makedirs(folder, exist_ok=True)
            handle, path = tempfile.mkstemp(prefix=f"{key}-{attempt}-", suffix=".jsonl", dir=folder)
        else:
            handle, path = tempfile.mkstemp(prefix=f"{key}-{attempt}-", suffix=".jsonl")
            self._message_files.append(path)
        os.close(handle)
        return PipesFileMessageReader(path)


__all__ = ["AICompute", "CHECKPOINT_EXTRA"]
