"""What each materialization of an `ai_executor` step cost, on its asset.

A step's figures (what it reserved, what that cost, what of it was wasted) are known only once
its last attempt ended, after its process wrote its materializations: the run worker writes
them in the step's summary engine event (`attempts.StepAttempts.summary`). So that they are
found on the asset too, beside its materializations and over time, the run worker then writes
one `AssetObservation` for each asset and partition the step materialized, with the summary's
figures as typed metadata (`k8s_ai/cost`, `k8s_ai/waste_oom_killed_cost`, ...; a step that
materialized several assets puts its whole figures on each, and says how many:
`k8s_ai/step_assets`). An observation does not mark the asset as changed: nothing downstream
runs for it.

The run worker reads its run's events anyway (`loop.RunEvents`); `AssetCosts.seen` takes them
in order and says which observations are due. A resumed run worker passes it every event of
the run: a summary whose observations the dead run worker already wrote gets none again.

Example:
    >>> costs = AssetCosts()
    >>> costs.seen([])
    []
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dagster import AssetKey, AssetObservation, MetadataValue
from dagster._core.events import DagsterEvent, DagsterEventType

from .step_events import META, is_summary

STEP_KEY = META + "step"  # the step whose summary an observation carries
# the summary's figures an observation carries (and every `k8s_ai/waste_...` one)
OBSERVED = tuple(
    META + name
    for name in (
        "cost",
        "currency",
        "cpu_seconds",
        "memory_gib_seconds",
        "gpu_seconds",
        "wall_seconds",
        "queued_seconds",
        "attempts",
        "peak_memory_bytes",
        "requested_memory_bytes",
    )
)


class AssetCosts:
    """See the module docstring."""

    def __init__(self) -> None:
        self._made: dict[str, dict[tuple[AssetKey, str | None], None]] = {}  # step → assets
        self._observed: set[str] = set()  # steps whose observations are written

    def seen(self, events: Iterable[DagsterEvent]) -> list[tuple[str, AssetObservation]]:
        """Take in the run's next events (in order); (step, observation) for each asset and
        partition of each step whose summary is among them and was not observed yet."""
        due: dict[str, Mapping[str, MetadataValue]] = {}
        for event in events:
            key, kind = event.step_key, event.event_type
            if key is None:
                continue
            if kind is DagsterEventType.ASSET_MATERIALIZATION:
                done = event.step_materialization_data.materialization
                self._made.setdefault(key, {})[(done.asset_key, done.partition)] = None
            elif kind is DagsterEventType.ASSET_OBSERVATION:
                if STEP_KEY in event.asset_observation_data.asset_observation.metadata:
                    self._observed.add(key)
            elif kind is DagsterEventType.ENGINE_EVENT and is_summary(
                event.engine_event_data.metadata
            ):
                due[key] = event.engine_event_data.metadata
        observations = []
        for key, summary in due.items():
            if key in self._observed:
                continue
            self._observed.add(key)
            assets = self._made.pop(key, {})
            metadata = {
                **{name: value for name, value in summary.items() if _carried(name)},
                STEP_KEY: MetadataValue.text(key),
                META + "step_assets": MetadataValue.int(len(assets)),
            }
            for asset_key, partition in assets:
                observations.append(
                    (key, AssetObservation(asset_key, partition=partition, metadata=metadata))
                )
        return observations


def _carried(name: str) -> bool:
    """Whether an observation carries the summary's figure `name`."""
    return name in OBSERVED or name.startswith(META + "waste_")


__all__ = ["AssetCosts", "OBSERVED", "STEP_KEY"]
