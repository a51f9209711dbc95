"""`TreeSampler`: a tree sampled many times a second reads only the members it knows, and looks
for new ones (every process's parent read) at most every `rescan_s`."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from k8s_ai_orchestrator.proctree import TreeSampler
from tests.support import FakeClock

HOLD = "import sys, time; block = bytearray(64 << 20); print('held', flush=True); time.sleep(60)"
SPAWN = (
    "import subprocess, sys, time; input(); "
    f"subprocess.Popen([sys.executable, '-c', {HOLD!r}]).wait(); time.sleep(60)"
)
MiB = 1 << 20


def test_a_child_counts_from_the_next_look_and_a_gone_one_is_dropped(monkeypatch) -> None:
    clock = FakeClock()
    parent = subprocess.Popen(
        [sys.executable, "-c", SPAWN], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    looks: list[int] = []
    real_children = psutil.Process.children

    def counted(self, recursive=False):  # type: ignore[no-untyped-def]
        looks.append(self.pid)
        return real_children(self, recursive=recursive)

    monkeypatch.setattr(psutil.Process, "children", counted)
    try:
        sampler = TreeSampler(parent.pid, rescan_s=1.0, clock=clock)
        alone = sampler.charged_memory(limit=1 << 40)
        assert parent.stdin is not None
        parent.stdin.write(b"\n")
        parent.stdin.flush()
        deadline = time.monotonic() + 30
        while not real_children(psutil.Process(parent.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        (child,) = real_children(psutil.Process(parent.pid))
        while psutil.Process(child.pid).memory_info().rss < 64 * MiB:
            assert time.monotonic() < deadline, "the child never held its 64 MiB"
            time.sleep(0.05)

        for _ in range(5):  # between two looks: only the parent is read
            assert sampler.charged_memory(limit=1 << 40) < alone + 32 * MiB
            assert [pid for pid, _ in sampler.cpu_seconds()] == [parent.pid]
        assert looks == [parent.pid]

        clock.advance(1.0)
        assert sampler.charged_memory(limit=1 << 40) >= alone + 64 * MiB  # found by the look
        assert {pid for pid, _ in sampler.cpu_seconds()} == {parent.pid, child.pid}
        assert looks == [parent.pid, parent.pid]

        child.kill()
        child.wait(10)
        sampler.charged_memory(limit=1 << 40)
        assert [m.pid for m in sampler.members()] == [parent.pid]  # dropped before the next look
    finally:
        for process in psutil.Process(parent.pid).children(recursive=True):
            process.kill()
        parent.kill()
        parent.wait()
