"""Transports and gang supervision with small fakes that behave (no daemons, no waiting)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from slurm_support import launch_request

from k8s_ai_orchestrator.backends.base import JobHandle
from k8s_ai_orchestrator.backends.local.rank_launcher import supervise
from k8s_ai_orchestrator.backends.slurm import CommandResult, SlurmBackend, SlurmConfig
from k8s_ai_orchestrator.backends.slurm.cli import CliTransport
from k8s_ai_orchestrator.backends.slurm.rest import RestTransport
from k8s_ai_orchestrator.backends.slurm.script import batch_job
from k8s_ai_orchestrator.errors import BackendError, ConfigError, SubmitError
from k8s_ai_orchestrator.ranks import GangPlan
from tests.support import FakeClock

REST = SlurmConfig(
    transport="rest",
    rest_url="http://slurm-login:6820",
    rest_user="ml",
    rest_token="expired",
    workdir="/shared/k8s_ai",
)


OPENAPI_22_05 = (Path(__file__).parent / "golden" / "rest" / "openapi-22.05.json").read_bytes()


class FakeSlurmRest:
    """Answers slurmrestd paths from a table (the OpenAPI description as a real 22.05 server
    does) and keeps every request it received but that one."""

    def __init__(self, answers: Mapping[str, tuple[int, object]]) -> None:
        self.answers = answers
        self.requests: list[tuple[str, str, dict[str, object] | None]] = []

    def __call__(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes | None, timeout: float
    ) -> tuple[int, bytes]:
        if url.endswith("/openapi/v3"):  # read first, as from a real 22.05 slurmrestd
            return 200, OPENAPI_22_05
        path = url.split("/v0.0.38/", 1)[1]
        self.requests.append((method, path, json.loads(body) if body else None))
        status, answer = self.answers[f"{method} {path}"]
        return status, json.dumps(answer).encode()


class FakeCommands:
    """A Slurm CLI that answers from a table keyed by the program name."""

    def __init__(self, answers: Mapping[str, CommandResult | Exception]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], stdin: str | None, timeout_s: float) -> CommandResult:
        self.calls.append(list(argv))
        answer = self.answers[argv[0] if argv[0] != "ssh" else argv[-1].split()[-2]]
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_an_expired_rest_token_says_how_to_renew_it() -> None:
    rest = RestTransport(REST, FakeSlurmRest({"GET job/7": (401, {})}))

    with pytest.raises(BackendError, match="scontrol token username=ml"):
        rest.job_info("7")


def test_a_busy_slurmrestd_is_a_transient_error() -> None:
    rest = RestTransport(REST, FakeSlurmRest({"GET job/7": (503, {})}))

    with pytest.raises(BackendError) as failure:
        rest.job_info("7")
    assert failure.value.transient


def test_rest_submission_carries_the_gang_shape_and_the_dagster_home(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DAGSTER_HOME", "/shared/dagster")
    fake = FakeSlurmRest({"POST job/submit": (200, {"job_id": 12, "errors": []})})
    job = batch_job(launch_request(["true"], nodes=2, gpu=2), REST)

    assert RestTransport(REST, fake).submit(job, "#!/bin/bash\ntrue\n", "train") == "12"

    sent = fake.requests[0][2]
    assert sent is not None
    props = sent["job"]
    assert isinstance(props, dict)
    assert (props["nodes"], props["tasks_per_node"], props["gres"]) == ([2, 2], 1, "gpu:2")
    assert props["environment"]["DAGSTER_HOME"] == "/shared/dagster"
    assert "signal" not in props, "slurmrestd v0.0.38 cannot signal the batch shell"


def test_rest_job_state_and_raw_exit_status_are_decoded() -> None:
    job = {
        "job_id": 7,
        "job_state": "NODE_FAIL",
        "state_reason": "NodeDown",
        "exit_code": 256,
        "nodes": "n[1-2]",
        "batch_host": "n1",
        "start_time": 100,
        "end_time": 160,
        "tres_alloc_str": "cpu=2,mem=512M,node=2",
    }
    rest = RestTransport(REST, FakeSlurmRest({"GET job/7": (200, {"jobs": [job]})}))

    info = rest.job_info("7")

    assert info is not None
    assert (info.state, info.exit_code, info.nodes) == ("NODE_FAIL", 1, ("n1", "n2"))
    assert (info.start_time, info.end_time, info.cpus) == (100.0, 160.0, 2)


def test_the_cli_over_ssh_is_the_same_commands_behind_a_prefix() -> None:
    fake = FakeCommands({"scancel": CommandResult(0, "", "")})
    config = SlurmConfig(ssh_host="login1", slurm_conf="/etc/slurm/prod.conf")

    CliTransport(config, fake).cancel("42")

    assert fake.calls == [
        ["ssh", "-o", "BatchMode=yes", "--", "login1", "SLURM_CONF=/etc/slurm/prod.conf scancel 42"]
    ]


def test_an_unanswering_slurmctld_is_a_transient_error() -> None:
    fake = FakeCommands({"scontrol": TimeoutError("scontrol did not finish in 30s")})

    with pytest.raises(BackendError, match="scontrol ping") as failure:
        CliTransport(SlurmConfig(), fake).job_info("42")
    assert failure.value.transient


def test_an_sbatch_refusal_names_the_step_and_slurms_words() -> None:
    refusal = CommandResult(1, "", "sbatch: error: invalid account or account/partition\n")
    job = batch_job(launch_request(["true"]), SlurmConfig())

    with pytest.raises(
        SubmitError, match="step 'train': sbatch refused the job: .*invalid account"
    ):
        CliTransport(SlurmConfig(), FakeCommands({"sbatch": refusal})).submit(job, "", "train")


class FakeRank:
    """A rank process that exits with `code` after `polls` polls (None: never)."""

    def __init__(self, code: int | None, polls: int = 0) -> None:
        self.code, self.polls = code, polls

    def poll(self) -> int | None:
        if self.polls > 0:
            self.polls -= 1
            return None
        return self.code


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def plan(timeout_s: float | None = None, straggler_timeout_s: float = 60.0) -> GangPlan:
    return GangPlan(2, 1, 0, 1, "python", timeout_s, straggler_timeout_s)


def test_a_straggler_is_stopped_once_its_peer_has_been_gone_too_long() -> None:
    fake_time = FakeTime()
    ranks = [FakeRank(0), FakeRank(None)]

    outcome = supervise(ranks, plan(straggler_timeout_s=5), fake_time.clock, fake_time.sleep)

    assert outcome.timed_out
    assert "ranks [1] still running 5s after a peer" in outcome.detail
    assert 5 < fake_time.now < 6


def test_the_first_failing_rank_ends_the_gang_at_once() -> None:
    fake_time = FakeTime()
    ranks = [FakeRank(None), FakeRank(2, polls=3)]

    outcome = supervise(ranks, plan(), fake_time.clock, fake_time.sleep)

    assert (outcome.returncode, outcome.timed_out) == (2, False)
    assert outcome.detail == "rank 1 exited with code 2"


def test_the_gang_timeout_bounds_ranks_that_never_finish() -> None:
    fake_time = FakeTime()

    outcome = supervise(
        [FakeRank(None), FakeRank(None)], plan(timeout_s=30), fake_time.clock, fake_time.sleep
    )

    assert outcome.timed_out and "still running after 30s" in outcome.detail


@pytest.mark.parametrize("field", ["partition", "account"])
def test_a_slurm_name_with_a_trailing_newline_is_refused_in_config(field: str) -> None:
    with pytest.raises(ConfigError, match=rf"slurm\.{field}='gpu\\n' is not a Slurm name"):
        SlurmConfig(**{field: "gpu\n"})


class SequencedCommands(FakeCommands):
    """FakeCommands whose answer for a program may be a list, answered in turn (the last
    one again once the list is used up)."""

    def __call__(self, argv: Sequence[str], stdin: str | None, timeout_s: float) -> CommandResult:
        answers = self.answers[argv[0]]
        if isinstance(answers, list):
            self.calls.append(list(argv))
            return answers.pop(0) if len(answers) > 1 else answers[0]
        return super().__call__(argv, stdin, timeout_s)


ENDED_JOB = (
    "JobId=7 JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=n1 BatchHost=n1 "
    "StartTime=2026-12-05T08:00:00 EndTime=2026-12-05T08:00:10 TRES=cpu=1,mem=1024M,node=1\n"
)
STARTED_RECORD = CommandResult(0, "7|PENDING||00:00:00\n", "")
ENDED_RECORD = CommandResult(0, "7|COMPLETED||00:04.500\n7.batch|COMPLETED|10660K|00:04.500\n", "")


@pytest.mark.parametrize(
    ("records", "cpu_used", "sleeps"),
    [
        pytest.param([STARTED_RECORD, STARTED_RECORD, ENDED_RECORD], 4.5, 2, id="end-arrives"),
        pytest.param([STARTED_RECORD], None, 12, id="end-never-arrives"),
        pytest.param([CommandResult(1, "", "sacct: disabled")], None, 0, id="no-accounting"),
    ],
)
def test_an_ended_jobs_use_waits_a_moment_for_its_end_to_reach_slurmdbd(
    records: list[CommandResult], cpu_used: float | None, sleeps: int
) -> None:
    """slurmctld sends the end to slurmdbd a moment after the job ends: the record as the job
    started is read again for a bounded time, never taken as a job that used no CPU."""
    fake = SequencedCommands({"scontrol": CommandResult(0, ENDED_JOB, ""), "sacct": records})
    clock = FakeClock()
    backend = SlurmBackend(SlurmConfig(), runner=fake, clock=clock, sleep=clock.advance)

    usage = backend.usage(JobHandle("slurm", "7", "train"))

    assert usage.cpu_used_seconds == cpu_used
    assert usage.wall_seconds == 10.0
    assert len([c for c in fake.calls if c[0] == "sacct"]) == sleeps + 1
