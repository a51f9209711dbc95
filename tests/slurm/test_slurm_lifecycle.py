"""A step's life on a real Slurm, each version (conftest.py's `versioned_cluster`) over each
transport (`any_backend`): pending with Slurm's reason, failures, node loss, USR2
checkpoint-and-requeue, cancellation and accounting (slurmdbd's)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from slurm_support import launch_request, program, wait_for_file, wait_for_status

from k8s_ai_orchestrator.backends.base import FailureReason, StepState, StepStatus
from k8s_ai_orchestrator.backends.slurm import SlurmBackend
from k8s_ai_orchestrator.testing.slurm import LocalSlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

SLEEP = ["sleep", "300"]


@pytest.fixture
def cluster(versioned_cluster: LocalSlurmCluster) -> LocalSlurmCluster:
    return versioned_cluster


@pytest.fixture
def backend(any_backend: SlurmBackend) -> SlurmBackend:
    """Every test here runs over the CLI and over slurmrestd (conftest.py's `transport`)."""
    return any_backend


def running(status: StepStatus) -> bool:
    return status.state is StepState.RUNNING


def test_busy_nodes_leave_the_step_pending_with_slurms_reason(
    backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    cluster.run(["sbatch", "--nodes=3", "--exclusive", "--output=/dev/null", "--wrap=sleep 300"])

    status = wait_for_status(
        backend,
        backend.submit(launch_request(SLEEP)),
        lambda s: s.state is StepState.PENDING and s.waiting not in ("", "Pending", "None"),
    )

    assert status.waiting in ("Resources", "Priority")
    assert "Slurm job" in status.message and status.waiting in status.message


def test_a_failing_step_reports_error_with_its_exit_code(backend: SlurmBackend) -> None:
    handle = backend.submit(launch_request(["bash", "-c", "echo about to fail; exit 3"], nodes=1))

    status = wait_for_status(backend, handle, lambda s: s.is_terminal)

    assert (status.state, status.reason, status.exit_code) == (StepState.FAILED, "Error", 3)
    assert "about to fail" in backend.logs(handle, tail_lines=5)


def test_a_node_set_down_mid_run_is_reported_lost(
    backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    handle = backend.submit(launch_request(SLEEP))
    wait_for_status(backend, handle, running)
    info_nodes = backend.usage(handle).nodes

    cluster.set_node_state(info_nodes[-1], "down", reason="hardware test")
    status = wait_for_status(backend, handle, lambda s: s.is_terminal)

    assert status.reason == FailureReason.LOST.value
    assert "NODE_FAIL" in status.message


def test_a_preemptible_step_on_a_lost_node_is_requeued_and_reported_pending(
    backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    handle = backend.submit(launch_request(SLEEP, preemptible=True))
    wait_for_status(backend, handle, running)

    cluster.set_node_state(backend.usage(handle).nodes[-1], "down", reason="hardware test")
    status = wait_for_status(backend, handle, lambda s: "requeued" in s.message)

    assert status.state in (StepState.PENDING, StepState.RUNNING)


def test_usr2_checkpoints_the_step_then_requeues_it_and_it_resumes(
    backend: SlurmBackend, cluster: LocalSlurmCluster, tmp_path: Path
) -> None:
    request = launch_request(program("checkpoint_step.py", str(tmp_path)), preemptible=True)
    handle = backend.submit(request)
    wait_for_file(tmp_path / "started")

    cluster.run(["scancel", "--batch", "--signal=USR2", handle.job_id])
    wait_for_file(tmp_path / "checkpoint", timeout_s=60)
    status = wait_for_status(backend, handle, lambda s: s.is_terminal, timeout_s=150)

    assert status.state is StepState.SUCCEEDED, backend.logs(handle)
    assert (tmp_path / "resumed").read_text() == "1"
    assert "requeueing job" in backend.logs(handle)


def test_cancel_leaves_no_job_in_the_queue(
    backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    handle = backend.submit(launch_request(SLEEP))
    wait_for_status(backend, handle, running)

    backend.cancel(handle)
    backend.cancel(handle)  # idempotent

    status = wait_for_status(backend, handle, lambda s: s.is_terminal)
    assert status.reason == FailureReason.CANCELLED.value
    deadline = time.monotonic() + 30
    while cluster.run(["squeue", "-h", "-j", handle.job_id]).stdout.strip():
        assert time.monotonic() < deadline, "cancelled job still in squeue"
        time.sleep(0.2)


def test_usage_reports_node_cpu_memory_gpu_seconds_and_measured_use_of_a_finished_gang(
    backend: SlurmBackend,
) -> None:
    # 96 MiB held while it uses one CPU-second (however busy this machine is)
    hold_and_spin = "x = bytearray(96 << 20)\nimport time\nwhile time.process_time() < 1: x[0] = 1"
    handle = backend.submit(launch_request(["python3", "-c", hold_and_spin], gpu=1))
    wait_for_status(backend, handle, running)
    time.sleep(1.5)  # let jobacct_gather sample the running job once
    wait_for_status(backend, handle, lambda s: s.is_terminal)

    usage = backend.usage(handle)

    assert len(usage.nodes) == 2
    assert usage.wall_seconds >= 1
    assert usage.cpu_seconds == pytest.approx(2 * usage.wall_seconds)
    assert usage.gpu_seconds == pytest.approx(2 * usage.wall_seconds)
    assert usage.memory_gib_seconds == pytest.approx(0.5 * usage.wall_seconds)
    # measured: slurmdbd's MaxRSS and TotalCPU (sstat's samples too on the CLI transport)
    assert usage.max_rss_bytes is not None and usage.max_rss_bytes >= 96 * 1024**2
    assert usage.cpu_used_seconds is not None and usage.cpu_used_seconds >= 1.0


def sacct_seconds(text: str) -> float:
    """sacct's TotalCPU: [D-][HH:]MM:SS[.mmm]."""
    days, _, clock = text.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    hours, minutes, seconds = parts
    return (int(days) if days else 0) * 86400 + hours * 3600 + minutes * 60 + seconds


def sacct_bytes(text: str) -> int:
    """sacct's MaxRSS: a number with K, M or G (of 1024), or bytes."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text or 0)


def test_the_measured_use_agrees_with_sacct_within_the_accuracy_bounds(
    backend: SlurmBackend, cluster: LocalSlurmCluster
) -> None:
    """Issue 29's bounds: CPU-seconds within max(2 %, 1 s) of sacct's TotalCPU, peak memory
    within 5 % of its MaxRSS, read here with the sacct command whatever the transport."""
    spin = "x = bytearray(160 << 20)\nimport time\nwhile time.process_time() < 3: x[0] = 1"
    handle = backend.submit(launch_request(["python3", "-c", spin], nodes=1))
    wait_for_status(backend, handle, running)
    time.sleep(1.5)  # let jobacct_gather sample the running job once
    wait_for_status(backend, handle, lambda s: s.is_terminal)
    usage = backend.usage(handle)

    rows = cluster.run(
        ["sacct", "-j", handle.job_id, "-n", "-P", "-o", "JobID,TotalCPU,MaxRSS"]
    ).stdout.split()
    fields = [row.split("|") for row in rows]
    (job,) = [f for f in fields if f[0] == handle.job_id]
    total_cpu = sacct_seconds(job[1])
    max_rss = max(sacct_bytes(f[2]) for f in fields)
    assert total_cpu >= 3.0
    assert usage.cpu_used_seconds is not None
    assert abs(usage.cpu_used_seconds - total_cpu) <= max(0.02 * total_cpu, 1.0), (
        usage.cpu_used_seconds,
        total_cpu,
    )
    assert max_rss >= 160 << 20
    assert usage.max_rss_bytes is not None
    assert abs(usage.max_rss_bytes - max_rss) <= 0.05 * max_rss, (usage.max_rss_bytes, max_rss)
