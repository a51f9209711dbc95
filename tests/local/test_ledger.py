"""The machine-wide admission ledger: shared by processes, fair across runs, never leaking."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from k8s_ai_orchestrator.backends.local import AdmissionLedger, LocalCapacity
from k8s_ai_orchestrator.backends.local.ledger import Claim, LedgerState, Owner, Want, judge
from k8s_ai_orchestrator.errors import ConfigError

ROOT = Path(__file__).parents[2]
GI = 1024**3


def capacity(cpus: float, gpus: int = 0) -> LocalCapacity:
    return LocalCapacity(cpus=cpus, memory_bytes=8 * GI, gpus=gpus)


def want(run: str, step: str, cpus: float, *, alone: bool = False, gpus: int = 0) -> Want:
    return Want(run, step, f"{run}-{step}-0", cpus=cpus, memory_bytes=GI, gpus=gpus, alone=alone)


class Holder:
    """A `tests.local.ledger_holder` process: another run worker holding a claim."""

    def __init__(self, directory: Path, cpus: float, *, with_step: bool = False) -> None:
        argv = [sys.executable, "-m", "tests.local.ledger_holder", str(directory), str(cpus)]
        self.process = subprocess.Popen(
            [*argv, *(["--step"] if with_step else [])],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.reply = json.loads(self.process.stdout.readline())

    def release(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write("release\n")
        self.process.stdin.flush()
        assert self.process.stdout.readline().strip() == "released"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def wait_until_dead(pid: int) -> None:
    """Until the (not child) process `pid` has exited: gone, or a zombie nobody reaps."""
    process = psutil.Process(pid)
    for _ in range(600):
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} survived SIGKILL")


@pytest.fixture
def holders(tmp_path: Path) -> Iterator[list[Holder]]:
    started: list[Holder] = []
    yield started
    for holder in started:
        holder.kill()
        if holder.reply["step_pid"]:
            try:
                os.killpg(holder.reply["step_pid"], signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_a_run_waits_while_another_process_holds_the_machine_and_starts_once_it_releases(
    tmp_path: Path, holders: list[Holder]
) -> None:
    holders.append(holder := Holder(tmp_path, cpus=2))
    ledger = AdmissionLedger(tmp_path)
    assert holder.reply["admitted"]

    waiting = ledger.admit(want("run-b", "train", 2), capacity(2))
    assert not waiting.admitted
    assert "other runs on this machine hold 'held' of run holder-r" in waiting.reason

    holder.release()
    assert ledger.admit(want("run-b", "train", 2), capacity(2)).admitted


def test_the_claim_of_a_run_worker_killed_with_sigkill_is_reclaimed(
    tmp_path: Path, holders: list[Holder]
) -> None:
    holders.append(holder := Holder(tmp_path, cpus=2))
    ledger = AdmissionLedger(tmp_path)
    assert not ledger.admit(want("run-b", "train", 2), capacity(2)).admitted

    holder.kill()

    assert ledger.admit(want("run-b", "train", 2), capacity(2)).admitted
    assert [c.run_id for c in ledger.snapshot().claims] == ["run-b"]


def test_a_step_that_outlives_its_killed_run_worker_keeps_its_share_until_it_ends(
    tmp_path: Path, holders: list[Holder]
) -> None:
    holders.append(holder := Holder(tmp_path, cpus=2, with_step=True))
    ledger = AdmissionLedger(tmp_path)
    holder.kill()

    assert not ledger.admit(want("run-b", "train", 2), capacity(2)).admitted

    os.killpg(holder.reply["step_pid"], signal.SIGKILL)
    wait_until_dead(holder.reply["step_pid"])

    assert ledger.admit(want("run-b", "train", 2), capacity(2)).admitted


def test_each_run_admits_against_its_own_capacity_counting_what_every_run_holds() -> None:
    big, small = Owner("big", 1, 0.0), Owner("small", 2, 0.0)
    held = LedgerState(
        claims=(Claim(big, "run-big", "prep", "big-prep-0", cpus=3, memory_bytes=GI),)
    )

    assert judge(held, big, want("run-big", "more", 1), capacity(8)).admitted
    refused = judge(held, small, want("run-small", "tiny", 1), capacity(2))
    assert not refused.admitted
    assert "free 0 CPU" in refused.reason and "of 2 CPU" in refused.reason


def test_the_step_that_waited_longest_goes_first_across_runs(tmp_path: Path) -> None:
    run_a, run_b, run_c = (AdmissionLedger(tmp_path) for _ in range(3))
    assert run_a.admit(want("run-a", "prep", 2), capacity(2)).admitted
    assert not run_b.admit(want("run-b", "train", 2), capacity(2)).admitted
    assert not run_c.admit(want("run-c", "small", 1), capacity(2)).admitted

    run_a.release("run-a-prep-0")
    behind = run_c.admit(want("run-c", "small", 1), capacity(2))

    assert not behind.admitted
    assert "step 'train' of run run-b waits first (FIFO)" in behind.reason
    assert run_b.admit(want("run-b", "train", 2), capacity(2)).admitted
    run_b.release("run-b-train-0")
    assert run_c.admit(want("run-c", "small", 1), capacity(2)).admitted


def test_an_oversize_step_runs_alone_across_every_run_of_the_machine(tmp_path: Path) -> None:
    roomy, tight = AdmissionLedger(tmp_path), AdmissionLedger(tmp_path)
    assert roomy.admit(want("run-a", "prep", 1), capacity(8)).admitted
    assert not tight.admit(want("run-b", "xl", 4, alone=True), capacity(2)).admitted

    roomy.release("run-a-prep-0")
    assert tight.admit(want("run-b", "xl", 4, alone=True), capacity(2)).admitted
    beside = roomy.admit(want("run-a", "next", 1), capacity(8))

    assert not beside.admitted
    assert "step 'xl' of run run-b runs alone (oversize)" in beside.reason


def test_a_command_launched_from_a_running_step_goes_ahead_of_an_oversize_step_waiting(
    tmp_path: Path,
) -> None:
    """Run A's step holds a CPU and waits on its Pipes command; run B's oversize step waits for
    the whole machine. Queued behind B, the command would never start, nor A's step end."""
    run_a, run_b, command = (AdmissionLedger(tmp_path) for _ in range(3))
    assert run_a.admit(want("run-a", "report", 1), capacity(2)).admitted
    assert not run_b.admit(want("run-b", "mosaic", 4, alone=True), capacity(2)).admitted

    child = replace(want("run-a", "report-pipes", 0.5), parent_step_key="report")
    assert command.admit(child, capacity(2)).admitted

    other = run_a.admit(want("run-a", "later", 0.5), capacity(2))
    assert not other.admitted
    assert "step 'mosaic' of run run-b waits first (FIFO)" in other.reason
    command.release(child.job_id)
    run_a.release("run-a-report-0")
    assert run_b.admit(want("run-b", "mosaic", 4, alone=True), capacity(2)).admitted


def test_a_launched_command_may_use_its_waiting_parent_share_but_not_other_runs(
    tmp_path: Path,
) -> None:
    run_a, run_b, command = (AdmissionLedger(tmp_path) for _ in range(3))
    assert run_a.admit(want("run-a", "report", 2), capacity(4)).admitted
    assert run_b.admit(want("run-b", "train", 2), capacity(4)).admitted

    fits_in_parent = replace(want("run-a", "report-pipes", 2), parent_step_key="report")
    too_big = replace(want("run-a", "report-big", 3), parent_step_key="report")
    stranger = replace(want("run-c", "x-pipes", 1), parent_step_key="report")

    assert command.admit(fits_in_parent, capacity(4)).admitted
    refused = command.admit(too_big, capacity(4))
    assert not refused.admitted and "not enough is free" in refused.reason
    assert not command.admit(stranger, capacity(4)).admitted  # no parent of that run


def test_gpus_held_by_another_run_are_not_handed_out_twice(tmp_path: Path) -> None:
    run_a, run_b = AdmissionLedger(tmp_path), AdmissionLedger(tmp_path)
    first = run_a.admit(want("run-a", "embed", 1, gpus=1), capacity(4, gpus=2))
    second = run_b.admit(want("run-b", "embed", 1, gpus=1), capacity(4, gpus=2))

    assert (first.gpu_ids, second.gpu_ids) == ((0,), (1,))
    assert not run_b.admit(want("run-b", "more", 1, gpus=1), capacity(4, gpus=2)).admitted


def test_a_backend_that_leaves_gives_back_its_claims_and_its_place_in_line(
    tmp_path: Path,
) -> None:
    run_a, run_b, run_c = (AdmissionLedger(tmp_path) for _ in range(3))
    assert run_a.admit(want("run-a", "prep", 2), capacity(2)).admitted
    assert not run_b.admit(want("run-b", "train", 2), capacity(2)).admitted

    run_a.leave()
    run_b.leave()

    assert run_c.admit(want("run-c", "train", 2), capacity(2)).admitted


def test_a_ledger_folder_that_cannot_be_created_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "home").write_text("a file where DAGSTER_HOME should be a folder")

    with pytest.raises(ConfigError, match=r"cannot use the admission ledger in .*home/k8s_ai"):
        AdmissionLedger(tmp_path / "home" / "k8s_ai_local")


def test_a_rewrite_cut_short_after_its_document_leaves_a_readable_ledger(tmp_path: Path) -> None:
    run_a = AdmissionLedger(tmp_path)
    assert run_a.admit(want("run-a", "prep", 2), capacity(2)).admitted
    document = run_a.path.read_text()
    run_a.path.write_text(document + document[len(document) // 2 :])  # the old, longer tail

    run_b = AdmissionLedger(tmp_path)
    assert [c.step_key for c in run_b.snapshot().claims] == ["prep"]
    assert not run_b.admit(want("run-b", "train", 2), capacity(2)).admitted
