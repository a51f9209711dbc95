"""A run worker SIGKILLed while a gang runs on a tenant is a non-event: the resumed run worker
(`dagster api resume_run`, as run monitoring starts it) reattaches to the gang's Indexed Job,
and every rank runs once. The ranks are real processes in the gang's pods, which outlive the
run worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gang_support import GangTarget

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_resumed_run_worker_reattaches_to_a_running_gang_and_runs_each_rank_once(
    gang_target: GangTarget, run_worker: Any, tmp_path: Path
) -> None:
    executor = {
        "backend": "kubernetes",
        "default_tenant": "team-a",
        "kubernetes": gang_target.config(),
    }
    run_config = {
        "execution": {"config": executor},
        "ops": {"gang_tally": {"config": {"dir": str(tmp_path)}}},
    }
    worker = run_worker("gang_tally_job", run_config)
    reattached = worker.taken_over_mid_gang(tmp_path)
    assert reattached.startswith("Reattached to step 'gang_tally' (attempt 1, kubernetes job ")
    (job,) = [
        j
        for j in gang_target.jobs("team-a")
        if j["metadata"]["annotations"].get("k8s-ai/step-key") == "gang_tally"
    ]
    assert (job["spec"]["completionMode"], job["spec"]["completions"]) == ("Indexed", 2)
