"""`due()` turns true when the interval elapsed or a preemption signal arrived."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import threading
from pathlib import Path

import fsspec
import pytest

from k8s_ai_orchestrator.checkpoint import (
    CheckpointHandle,
    CheckpointKey,
    CheckpointStore,
    HandleSettings,
    Preempted,
)
from k8s_ai_orchestrator.checkpoint.signals import PreemptionWatch
from k8s_ai_orchestrator.checkpoint.storage import KeyFolder
from k8s_ai_orchestrator.errors import CheckpointError
from tests.support import FakeClock

from .support import program

pytestmark = pytest.mark.timeout(120)


def test_due_is_false_until_the_interval_elapses(tmp_path: Path, clock: FakeClock) -> None:
    store = CheckpointStore(root=f"file://{tmp_path}", interval_s=60, handle_signals=False)
    ckpt = store.open("tiles", clock=clock)
    assert not ckpt.due()
    clock.advance(59.9)
    assert not ckpt.due()
    clock.advance(0.1)
    assert ckpt.due()


def test_a_save_restarts_the_interval(tmp_path: Path, clock: FakeClock) -> None:
    store = CheckpointStore(root=f"file://{tmp_path}", interval_s=60, handle_signals=False)
    ckpt = store.open("tiles", clock=clock)
    clock.advance(61)
    ckpt.save({"i": 1})
    assert not ckpt.due()
    clock.advance(60)
    assert ckpt.due()


def test_the_interval_defaults_to_five_minutes(tmp_path: Path, clock: FakeClock) -> None:
    ckpt = CheckpointStore(root=f"file://{tmp_path}", handle_signals=False).open("t", clock=clock)
    clock.advance(299)
    assert not ckpt.due()
    clock.advance(1)
    assert ckpt.due()


def test_exit_if_preempted_does_nothing_without_a_signal(tmp_path: Path) -> None:
    ckpt = CheckpointStore(root=f"file://{tmp_path}", handle_signals=False).open("tiles")
    assert not ckpt.preempted
    ckpt.exit_if_preempted()


def test_preempted_is_a_checkpoint_error_that_bypasses_the_retry_policy() -> None:
    from dagster import Failure

    error = Preempted("asset x received SIGTERM")
    assert isinstance(error, CheckpointError) and isinstance(error, Failure)
    assert error.allow_retries is False and error.transient is True


def test_opening_a_handle_outside_the_main_thread_works_without_signal_handlers(
    tmp_path: Path,
) -> None:
    store = CheckpointStore(root=f"file://{tmp_path}")
    results: list[object] = []

    def step() -> None:
        with store.open("threaded") as ckpt:
            ckpt.save({"ok": True})
            results.append(ckpt.load())

    thread = threading.Thread(target=step)
    thread.start()
    thread.join(30)
    assert results == [{"ok": True}]


def test_closing_the_last_handle_gives_back_the_previous_handlers(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGUSR2)
    store = CheckpointStore(root=f"file://{tmp_path}")
    with store.open("a"), store.open("b"):
        assert signal.getsignal(signal.SIGUSR2) != before
    assert signal.getsignal(signal.SIGUSR2) == before


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGUSR2"])
def test_a_preemption_signal_makes_due_true_at_once_and_the_next_save_commits_then_stops(
    tmp_path: Path, sig: str
) -> None:
    root = f"file://{tmp_path}/ckpt"
    done = subprocess.run(
        [*program("self_signal.py"), root, sig, "1"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines()[0] == "saved 5"
    assert f"received {sig}" in done.stdout
    assert CheckpointStore(root=root, handle_signals=False).open("self-signal").load() == {
        "unit": 5
    }


def test_a_second_sigterm_falls_through_to_the_previous_handler(tmp_path: Path) -> None:
    done = subprocess.run(
        [*program("self_signal.py"), f"file://{tmp_path}", "SIGTERM", "2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == -signal.SIGTERM
    assert "saved" not in done.stdout


def test_every_step_of_an_in_process_run_gets_the_save_then_exit_contract(tmp_path: Path) -> None:
    root = f"file://{tmp_path}/ckpt"
    done = subprocess.run(
        [*program("two_assets.py"), root], capture_output=True, text=True, timeout=90
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report == {
        "failed_step": "second",
        "error_class": "Preempted",
        "sigusr2_given_back": True,
    }


def notified_handle(
    tmp_path: Path, *, stop_after_preempted_save: bool = True
) -> tuple[CheckpointHandle, PreemptionWatch]:
    """A handle on its own watch, so a test can deliver a notice without a real signal."""
    fs = fsspec.filesystem("file")
    settings = HandleSettings(stop_after_preempted_save=stop_after_preempted_save)
    watch = PreemptionWatch()
    folder = KeyFolder(fs, f"{tmp_path}/keys/loop/unpartitioned", root=str(tmp_path))
    handle = CheckpointHandle(
        folder,
        CheckpointKey(("loop",), namespace="keys"),
        settings,
        log=logging.getLogger("test"),
        watch=watch,
        install_signals=False,
    )
    return handle, watch


def test_save_after_a_preemption_notice_commits_then_stops_the_step(tmp_path: Path) -> None:
    ckpt, watch = notified_handle(tmp_path)
    ckpt.save({"unit": 1}, progress=1)
    watch.notify(signal.SIGTERM)

    with pytest.raises(Preempted, match=r"key loop received SIGTERM and stopped \(checkpoint "):
        ckpt.save({"unit": 2}, progress=2)

    reopened = CheckpointStore(root=f"file://{tmp_path}", handle_signals=False).open("loop")
    assert reopened.load() == {"unit": 2}


def test_save_dir_after_a_preemption_notice_also_stops_the_step(tmp_path: Path) -> None:
    ckpt, watch = notified_handle(tmp_path / "root")
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "weights.bin").write_bytes(b"w")
    watch.notify(signal.SIGUSR2)

    with pytest.raises(Preempted, match="received SIGUSR2"):
        ckpt.save_dir(tmp_path / "model", progress=7)

    assert ckpt.latest is not None and ckpt.latest.progress == 7


def test_stop_after_preempted_save_false_lets_the_step_finish_its_unit(tmp_path: Path) -> None:
    ckpt, watch = notified_handle(tmp_path, stop_after_preempted_save=False)
    watch.notify(signal.SIGTERM)

    ckpt.save({"unit": 1}, progress=1)
    ckpt.save({"unit": 2}, progress=2)

    with pytest.raises(Preempted, match=r"progress 2; work since that checkpoint: "):
        ckpt.exit_if_preempted()


def test_the_opted_out_loop_runs_to_its_end_then_stops(tmp_path: Path) -> None:
    root = f"file://{tmp_path}/ckpt"
    done = subprocess.run(
        [*program("self_signal.py"), root, "SIGTERM", "1", "run-on"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines()[:2] == ["finished 9", "saved 9"]
    reopened = CheckpointStore(root=root, handle_signals=False).open("self-signal")
    assert reopened.load() == {"unit": 9}
