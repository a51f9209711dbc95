"""Slurm job states and configuration, as the executor sees them (pure: no daemons)."""

from __future__ import annotations

import pytest

from k8s_ai_orchestrator.backends.base import StepState
from k8s_ai_orchestrator.backends.slurm import JobInfo, SlurmConfig, to_step_status
from k8s_ai_orchestrator.backends.slurm.config import config_from_mapping
from k8s_ai_orchestrator.backends.slurm.states import (
    expand_hostlist,
    memory_kill,
    parse_scontrol_job,
    parse_tres,
)
from k8s_ai_orchestrator.errors import ConfigError


@pytest.mark.parametrize(
    ("slurm_state", "state", "reason"),
    [
        ("COMPLETED", StepState.SUCCEEDED, None),
        ("RUNNING", StepState.RUNNING, None),
        ("COMPLETING", StepState.RUNNING, None),
        ("FAILED", StepState.FAILED, "Error"),
        ("OUT_OF_MEMORY", StepState.FAILED, "OOMKilled"),
        ("PREEMPTED", StepState.FAILED, "Preempted"),
        ("NODE_FAIL", StepState.FAILED, "Lost"),
        ("BOOT_FAIL", StepState.FAILED, "Lost"),
        ("TIMEOUT", StepState.FAILED, "DeadlineExceeded"),
        ("DEADLINE", StepState.FAILED, "DeadlineExceeded"),
        ("CANCELLED", StepState.FAILED, "Cancelled"),
        ("REQUEUED", StepState.PENDING, "Requeued"),
    ],
)
def test_slurm_states_map_to_step_states_and_reasons(
    slurm_state: str, state: StepState, reason: str | None
) -> None:
    status = to_step_status(JobInfo("42", slurm_state, exit_code=1 if state else None))

    assert (status.state, status.reason or status.waiting or None) == (state, reason)


def test_pending_carries_slurms_reason_and_the_requeue_count() -> None:
    status = to_step_status(JobInfo("42", "PENDING", reason="ReqNodeNotAvail", restarts=2))

    assert (status.reason, status.waiting) == (None, "ReqNodeNotAvail")
    assert status.message == "Slurm job 42 is pending (ReqNodeNotAvail); requeued 2 time(s)"


def test_a_failure_names_the_job_exit_code_signal_and_nodes() -> None:
    info = JobInfo("42", "FAILED", exit_code=1, signal=9, nodes=("n1", "n2"), batch_host="n1")

    status = to_step_status(info)

    assert status.message == "Slurm job 42 ended FAILED with exit code 1 (signal 9); nodes n1,n2"
    assert (status.exit_code, status.node) == (1, "n1")


OVER_MEMORY_KILL = (
    "slurmstepd-n1: error: StepId=42.batch exceeded memory limit (179089408 > 67108864), "
    "being killed"
)


def test_a_failed_job_slurmstepd_killed_over_its_memory_is_oom_killed() -> None:
    info = JobInfo(
        "42",
        "FAILED",
        reason="JobLaunchFailure",
        exit_code=0,
        signal=9,
        nodes=("n1",),
        memory_kill=OVER_MEMORY_KILL,
    )

    status = to_step_status(info)

    assert (status.state, status.reason) == (StepState.FAILED, "OOMKilled")
    assert status.message == (
        f"Slurm job 42 ended FAILED with exit code 0 (signal 9); nodes n1; {OVER_MEMORY_KILL}"
    )


@pytest.mark.parametrize(
    "line",
    [
        OVER_MEMORY_KILL,  # JobAcctGatherParams=OverMemoryKill
        "slurmstepd-n2: error: StepId=42.0 exceeded memory limit (204992512 > 67108864), "
        "being killed",  # the same for a gang's srun step
        "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=42.batch. Some of your "
        "processes may have been killed by the cgroup out-of-memory handler.",  # task/cgroup
        "slurmstepd: error: Detected 2 oom-kill event(s) in step 42.0 cgroup. Some of your "
        "processes may have been killed by the cgroup out-of-memory handler.",  # before 21.08
        "slurmstepd-n1: error: Detected 1 oom_kill event in StepId=42.batch. Some of the step "
        "tasks have been OOM Killed.",  # task/cgroup, Slurm 24.11
    ],
)
def test_slurmstepds_memory_kill_is_found_in_the_job_output(line: str) -> None:
    output = f"training\n{line}\nTraceback (most recent call last):\n"

    assert memory_kill(output, "42") == line
    assert memory_kill(output, "4") == ""


def test_a_program_printing_about_memory_is_no_memory_kill() -> None:
    output = "warning: StepId=42.batch exceeded memory limit (1 > 0), being killed\n"

    assert memory_kill(output, "42") == ""


def test_scontrol_job_line_is_parsed() -> None:
    line = (
        "JobId=7 JobName=k8sai.x JobState=NODE_FAIL Reason=NodeDown Requeue=0 Restarts=1 "
        "ExitCode=0:9 StartTime=2026-01-01T10:00:00 EndTime=2026-01-01T10:30:00 "
        "NodeList=gpu[01-02] BatchHost=gpu01 TRES=cpu=16,mem=64G,node=2,gres/gpu=8 "
        "Comment=k8s_ai:run=r,step=JobState%3DCOMPLETED"
    )

    info = parse_scontrol_job(line)

    assert (info.state, info.reason, info.exit_code, info.signal) == ("NODE_FAIL", "NodeDown", 0, 9)
    assert info.nodes == ("gpu01", "gpu02")
    assert info.end_time is not None and info.start_time is not None
    assert info.end_time - info.start_time == 1800
    assert (info.cpus, info.memory_mb, info.gpus, info.restarts) == (16, 65536, 8, 1)


def test_slurm_24_11s_out_of_memory_job_is_oom_killed_and_its_mark_explained() -> None:
    line = (
        "JobId=9 JobName=k8sai.x JobState=OUT_OF_MEMORY Reason=OutOfMemory Dependency=(null) "
        "Requeue=0 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:125 RunTime=00:00:02 "
        "NodeList=n1 BatchHost=n1 TRES=cpu=1,mem=256M,node=1,billing=1"
    )

    status = to_step_status(parse_scontrol_job(line))

    assert (status.state, status.reason, status.exit_code) == (StepState.FAILED, "OOMKilled", 0)
    assert status.message == (
        "Slurm job 9 ended OUT_OF_MEMORY with exit code 0 (signal 125: Slurm's out-of-memory "
        "mark); reason: OutOfMemory; nodes n1"
    )


def test_an_out_of_memory_job_names_slurmstepds_line() -> None:
    line = (
        "slurmstepd-n1: error: Detected 1 oom_kill event in StepId=9.batch. Some of the step "
        "tasks have been OOM Killed."
    )
    info = JobInfo("9", "OUT_OF_MEMORY", reason="OutOfMemory", exit_code=0, memory_kill=line)

    status = to_step_status(info)

    assert (status.reason, status.message) == (
        "OOMKilled",
        f"Slurm job 9 ended OUT_OF_MEMORY with exit code 0; reason: OutOfMemory; {line}",
    )


def test_slurm_24_11s_alloc_tres_and_gpus_per_node_give_the_allocation() -> None:
    """24.11 says AllocTRES=, and without slurmdbd counts no gres/gpu there (slurmctld refuses
    AccountingStorageTRES=gres/gpu): the GPUs come from TresPerNode. A real 24.11 line."""
    line = (
        "JobId=17 JobState=COMPLETED Reason=None ExitCode=0:0 NodeList=n[1-2] BatchHost=n1 "
        "ReqTRES=cpu=2,mem=512M,node=2,billing=2 "
        "AllocTRES=cpu=2,mem=512M,node=2,billing=2 TresPerNode=gres/gpu:1"
    )

    info = parse_scontrol_job(line)

    assert (info.cpus, info.memory_mb, info.gpus, info.nodes) == (2, 512, 2, ("n1", "n2"))


def test_hostlists_and_tres_strings_expand() -> None:
    assert expand_hostlist("n[1-3,5],login") == ("n1", "n2", "n3", "n5", "login")
    assert parse_tres("cpu=2,mem=512M,node=1") == (2, 512, 0)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"transport": "ssh"}, "slurm.transport='ssh' is not allowed"),
        ({"partition": "gpu; rm -rf /"}, "slurm.partition='gpu; rm -rf /' is not a Slurm name"),
        ({"workdir": "relative/dir"}, "must be an absolute path"),
        ({"transport": "rest"}, "needs rest_url, rest_user and rest_token"),
        ({"time_limit": "soon"}, "slurm.time_limit='soon' is not allowed"),
        ({"partitoin": "gpu"}, "unknown slurm keys \\['partitoin'\\]"),
    ],
)
def test_bad_slurm_config_is_refused_with_the_key_and_the_fix(
    raw: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_mapping(raw)


@pytest.mark.parametrize(
    ("time_limit", "minutes"),
    [(90, 90), ("30", 30), ("01:30:00", 90), ("2-00:00:00", 2880), ("10:30", 11)],
)
def test_time_limits_in_slurm_formats_become_minutes(time_limit: int | str, minutes: int) -> None:
    assert SlurmConfig(time_limit=time_limit).time_limit_minutes() == minutes
