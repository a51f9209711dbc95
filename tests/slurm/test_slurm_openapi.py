"""The REST transport's version choice and payload shapes, from answers the real slurmrestd
gave: Slurm 22.05 (v0.0.38) and 24.11 (v0.0.40-v0.0.42), saved under golden/rest/, cut to what
the transport reads (the OpenAPI descriptions to their path keys; jobs, partitions and nodes to
their fields that openapi.py names; slurmdbd's jobs to the steps' `mem`/`cpu` TRES and CPU
time). Pure: an injected `HttpCall` serves the saved answers."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from slurm_support import launch_request

from k8s_ai_orchestrator.backends.slurm import SlurmConfig, batch_job, render_script, to_step_status
from k8s_ai_orchestrator.backends.slurm.accounting import (
    NOT_ENDED,
    Measured,
    from_sacct,
    from_slurmdb_jobs,
)
from k8s_ai_orchestrator.backends.slurm.openapi import (
    job_info,
    served_versions,
    submit_body,
)
from k8s_ai_orchestrator.backends.slurm.rest import RestTransport
from k8s_ai_orchestrator.errors import ConfigError, SubmitError

GOLDEN = Path(__file__).parent / "golden" / "rest"


def golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((GOLDEN / f"{name}.json").read_text())
    return data


class SavedSlurmrestd:
    """An `HttpCall` answering from saved answers of one slurmrestd; records what it was sent."""

    def __init__(self, description: str, answers: Mapping[str, tuple[int, str]]) -> None:
        self.answers = {"GET /openapi/v3": (200, description), **answers}
        self.sent: list[tuple[str, str, Any]] = []

    def __call__(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float
    ) -> tuple[int, bytes]:
        path = url.split("127.0.0.1:6820", 1)[1]
        self.sent.append((method, path, json.loads(body) if body else None))
        for key, (status, name) in self.answers.items():
            if key == f"{method} {path}" or key == f"{method} {path.split('/', 3)[-1]}":
                return status, json.dumps(golden(name)).encode()
        return 404, b"Unable find requested URL. Please view /openapi/v3 for API reference."


def transport(http: SavedSlurmrestd, version: str | None = None) -> RestTransport:
    config = SlurmConfig(
        transport="rest",
        rest_url="http://127.0.0.1:6820",
        rest_user="root",
        rest_token="secret-jwt",
        rest_api_version=version,
    )
    return RestTransport(config, http)


def test_slurm_22_05_serves_only_v0_0_38_and_24_11_serves_v0_0_40_to_v0_0_42() -> None:
    assert served_versions(golden("openapi-22.05")) == ("v0.0.38",)
    assert served_versions(golden("openapi-24.11")) == ("v0.0.40", "v0.0.41", "v0.0.42")


@pytest.mark.parametrize(
    ("description", "version"), [("openapi-22.05", "v0.0.38"), ("openapi-24.11", "v0.0.42")]
)
def test_the_transport_uses_the_newest_version_the_server_serves(
    description: str, version: str
) -> None:
    http = SavedSlurmrestd(description, {})

    assert transport(http).url("jobs") == f"http://127.0.0.1:6820/slurm/{version}/jobs"


def test_a_pinned_version_the_server_serves_is_used() -> None:
    assert transport(SavedSlurmrestd("openapi-24.11", {}), "v0.0.40").version == "v0.0.40"


def test_a_pinned_version_the_server_does_not_serve_is_refused_naming_what_it_serves() -> None:
    http = SavedSlurmrestd("openapi-24.11", {})

    with pytest.raises(ConfigError) as refused:
        transport(http, "v0.0.38").job_info("7")

    assert str(refused.value).startswith(
        "slurm.rest_api_version='v0.0.38' is not served by slurmrestd at "
        "http://127.0.0.1:6820, which serves v0.0.40, v0.0.41, v0.0.42; remove rest_api_version"
    )
    assert "secret-jwt" not in str(refused.value)


def test_a_v0_0_42_submit_body_uses_its_shapes_and_the_real_server_took_it() -> None:
    job = {
        "name": "k8sai.train",
        "nodes": [2, 2],
        "memory_per_node": 256,
        "time_limit": 5,
        "open_mode": "append",
        "environment": {"PATH": "/usr/bin:/bin", "K8S_AI_X": "a=b"},
        "gres": "gpu:1",
    }

    body = submit_body("v0.0.42", job, "#!/bin/bash\ntrue\n")

    assert body == {
        "job": {
            "name": "k8sai.train",
            "nodes": "2",
            "memory_per_node": {"set": True, "infinite": False, "number": 256},
            "time_limit": {"set": True, "infinite": False, "number": 5},
            "open_mode": ["APPEND"],
            "environment": ["PATH=/usr/bin:/bin", "K8S_AI_X=a=b"],
            "tres_per_node": "gres/gpu:1",
            "script": "#!/bin/bash\ntrue\n",
        }
    }
    assert submit_body("v0.0.38", job, "s") == {"script": "s", "job": job}
    assert golden("v0.0.42-submit")["job_id"] == 1  # what slurmrestd answered to this shape


@pytest.mark.parametrize(
    ("answer", "state", "reason", "exit_code", "nodes"),
    [
        ("v0.0.42-job_running", "Running", None, None, ("n1",)),
        ("v0.0.42-job_completed", "Succeeded", None, 0, ("n1", "n2")),
        ("v0.0.42-job_failed_exit3", "Failed", "Error", 3, ("n1",)),
        ("v0.0.42-job_cancelled", "Failed", "Cancelled", 0, ("n1",)),
        ("v0.0.40-job_completed", "Succeeded", None, 0, ("n1", "n2")),
        ("v0.0.40-job_cancelled", "Failed", "Cancelled", 0, ("n1",)),
    ],
)
def test_real_v0_0_4x_jobs_map_to_step_statuses(
    answer: str, state: str, reason: str | None, exit_code: int | None, nodes: tuple[str, ...]
) -> None:
    info = job_info(golden(answer)["jobs"][0], "0")

    status = to_step_status(info)

    assert (status.state.value, status.reason, status.exit_code) == (state, reason, exit_code)
    assert info.nodes == nodes and info.start_time is not None


@pytest.mark.parametrize("version", ["v0.0.40", "v0.0.42"])
def test_a_job_slurm_killed_over_its_memory_reads_as_signal_9_and_ends(version: str) -> None:
    info = job_info(golden(f"{version}-job_oom")["jobs"][0], "3")

    assert (info.state, info.reason, info.exit_code, info.signal) == (
        "FAILED",
        "RaisedSignal",
        0,
        9,
    )
    assert info.end_time is not None and info.end_time >= (info.start_time or 0)


def test_a_job_the_cgroup_oom_killer_ended_is_oom_killed_with_slurms_mark_explained() -> None:
    info = job_info(golden("v0.0.42-job_out_of_memory")["jobs"][0], "1")

    status = to_step_status(info)

    assert (info.state, info.reason, info.signal) == ("OUT_OF_MEMORY", "OutOfMemory", 125)
    assert (status.reason, status.exit_code) == ("OOMKilled", 0)
    assert "(signal 125: Slurm's out-of-memory mark)" in status.message


def test_a_cancelled_job_still_completing_has_its_base_state_and_no_live_state() -> None:
    row = golden("v0.0.42-job_cancelled")["jobs"][0]

    assert row["job_state"] == ["CANCELLED", "COMPLETING"]
    assert job_info(row, "4").state == "CANCELLED"


def test_state_and_unknown_jobs_over_the_transport() -> None:
    http = SavedSlurmrestd(
        "openapi-24.11",
        {"GET job/4": (200, "v0.0.42-job_running"), "GET job/999999": (404, "v0.0.42-job_unknown")},
    )
    rest = transport(http)

    running = rest.job_info("4")
    assert running is not None and running.state == "RUNNING" and running.batch_host == "n1"
    assert (running.cpus, running.memory_mb, running.gpus) == (1, 256, 1)  # GPUs: tres_per_node
    assert rest.job_info("999999") is None
    assert [path for _, path, _ in http.sent] == [
        "/openapi/v3",
        "/slurm/v0.0.42/job/4",
        "/slurm/v0.0.42/job/999999",
    ]


def test_partition_limits_from_v0_0_42s_nested_node_list() -> None:
    http = SavedSlurmrestd(
        "openapi-24.11",
        {"GET partition/debug": (200, "v0.0.42-partition"), "GET nodes": (200, "v0.0.42-nodes")},
    )

    limits = transport(http).limits("debug")

    assert limits.nodes == ("n1", "n2", "n3")
    assert (limits.max_gpus_per_node, limits.max_cpus_per_node) == (2, 4)
    assert limits.max_memory_mb_per_node == 4096


def test_a_refused_v0_0_42_submit_names_slurms_error(tmp_path: Path) -> None:
    http = SavedSlurmrestd("openapi-24.11", {"POST job/submit": (500, "v0.0.42-submit_refused")})
    rest = transport(http)
    job = batch_job(launch_request(["true"], nodes=4), replace(rest.config, workdir=str(tmp_path)))

    with pytest.raises(SubmitError, match="Requested node configuration is not available"):
        rest.submit(job, render_script(job), "train")

    method, path, body = http.sent[-1]
    assert (method, path, body["job"]["nodes"]) == ("POST", "/slurm/v0.0.42/job/submit", "4")
    assert "script" not in body and body["job"]["script"].startswith("#!")


@pytest.mark.parametrize(
    ("description", "version", "measured"),
    [
        ("openapi-22.05-slurmdbd", "v0.0.38", Measured(66154496, 0.400395)),
        ("openapi-24.11-slurmdbd", "v0.0.40", Measured(66162688, 0.441301)),
        ("openapi-24.11-slurmdbd", "v0.0.41", Measured(66162688, 0.441301)),
        ("openapi-24.11-slurmdbd", "v0.0.42", Measured(66162688, 0.441301)),
    ],
)
def test_a_finished_jobs_peak_rss_and_cpu_time_come_from_slurmdbd_on_every_version(
    description: str, version: str, measured: Measured
) -> None:
    # a 2-node job whose srun step held 50 MiB per task (sacct: MaxRSS 64600K for step 1.0)
    http = SavedSlurmrestd(
        description, {f"GET /slurmdb/{version}/job/1": (200, f"{version}-slurmdb_job")}
    )

    assert transport(http, version).measured("1") == measured
    assert http.sent[-1][1] == f"/slurmdb/{version}/job/1"


@pytest.mark.parametrize(
    ("description", "version"),
    [("openapi-22.05-slurmdbd", "v0.0.38"), ("openapi-24.11-slurmdbd", "v0.0.42")],
)
def test_a_job_slurmdbd_has_no_record_of_is_not_measured(description: str, version: str) -> None:
    http = SavedSlurmrestd(
        description, {f"GET /slurmdb/{version}/job/9": (200, f"{version}-slurmdb_job_unknown")}
    )

    assert transport(http).measured("9") is None


@pytest.mark.parametrize("description", ["openapi-22.05", "openapi-24.11"])
def test_without_slurmdbd_the_rest_transport_asks_no_accounting(description: str) -> None:
    http = SavedSlurmrestd(description, {})

    assert transport(http).measured("1") is None
    assert [path for _, path, _ in http.sent] == ["/openapi/v3"]


def test_sacct_rows_of_a_requeued_job_add_up_every_run() -> None:
    rows = [
        "7|NODE_FAIL||00:01.500",  # first run, ended by a node failure
        "7.batch|CANCELLED|70M|00:01.500",
        "7|COMPLETED||01:00.250",  # the requeued run
        "7.batch|COMPLETED|10660K|00:00.250",
        "7.0|COMPLETED|1.5G|01:00",
    ]

    assert from_sacct(rows, "7") == Measured(int(1.5 * 1024**3), 61.75)
    assert from_sacct(["8|COMPLETED|0|00:00.100"], "7") is None


@pytest.mark.parametrize(
    "last_run", ["7|PENDING||00:00:00", "7|RUNNING||00:00:00", "7|REQUEUED||00:00:00"]
)
def test_a_record_slurmdbd_holds_as_the_job_started_is_no_measurement(last_run: str) -> None:
    """slurmctld sends a job's end to slurmdbd a moment after it ends: until then sacct shows
    the run as it started, with no CPU time, which is not a job that used none."""
    assert from_sacct(["7|PREEMPTED||00:01.500", last_run], "7") is NOT_ENDED
    assert from_sacct(["7|CANCELLED by 0||00:01.500"], "7") == Measured(None, 1.5)


@pytest.mark.parametrize("state", ["RUNNING", ["PENDING"], ["RUNNING", "COMPLETING"], None])
def test_a_slurmdb_job_not_ended_there_is_no_measurement(state: object) -> None:
    steps = [{"time": {"total": {"seconds": 0, "microseconds": 0}}}]

    assert from_slurmdb_jobs([{"state": {"current": state}, "steps": steps}]) is NOT_ENDED
    ended = from_slurmdb_jobs([{"state": {"current": ["COMPLETED"]}, "steps": steps}])
    assert ended == Measured(None, 0.0)
