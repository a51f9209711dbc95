"""The entry point of a measured Kubernetes step pod: report memory, then run the step.

When a step's memory is measured (in-place growth, `memory="auto"`, a priced run), the Kubernetes
backend starts its container as `python -c <reporting.STEP_POD_MAIN> -m dagster api execute_step
...`: `pod_main` starts `UsageReporter`, a daemon thread that writes the container's working
set and CPU time (`usage_report`) to the container's stderr every `K8S_AI_USAGE_INTERVAL_S`
seconds (default 1), then runs the module (or `-c` code) in this same process, as python would,
and writes one last report when it returns or exits (the CPU time the step ends with; marked
`last`, so a log stream that ended after it needs no re-opening). The
step keeps its PID, its signals and its exit code; the executor reads the reports from the
pod's log, which it follows anyway, so it needs no `get nodes/proxy`.

The reports go to a copy of stderr taken before the step starts: Dagster's compute-log
capture, which redirects file descriptors 1 and 2 while an op runs, never sees them.

Example:
    >>> reporter = UsageReporter(interval_s=1.0, write=print)
    >>> reporter.read().source in ("cgroup v2", "cgroup v1", "process tree")
    True
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from .stepenv import USAGE_INTERVAL_S
from .usage_report import MemoryReading, cgroup_usage, format_report

DEFAULT_INTERVAL_S = 1.0


class UsageReporter:
    """Writes this container's memory in use every `interval_s` seconds until stopped.

    Args:
        interval_s: seconds between reports.
        write: where each report line goes.
        clock: wall-clock seconds stamped on each reading.
    """

    def __init__(
        self,
        interval_s: float,
        write: Callable[[str], object],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval_s = interval_s
        self._write = write
        self._clock = clock
        self._stop = threading.Event()

    def read(self) -> MemoryReading:
        """The container's working set and CPU time now (its cgroup's, else this process
        tree's: RSS, and CPU time of this process, its reaped children and its live ones)."""
        # the run worker imports this module for its name only: psutil loads in the pod
        from .proctree import tree_cpu_seconds, tree_rss

        reading = cgroup_usage() or MemoryReading(tree_rss(os.getpid()), "process tree", 0)
        if reading.cpu_seconds is None:
            own = os.times()
            live = tree_cpu_seconds(os.getpid())
            live.pop(next((k for k in live if k[0] == os.getpid()), (0, 0.0)), None)
            cpu = own.user + own.system + own.children_user + own.children_system
            reading = replace(reading, cpu_seconds=cpu + sum(live.values()))
        return replace(reading, at=self._clock())

    def report(self, last: bool = False) -> None:
        """Write one report now (`last`: the step has returned; nothing of it follows)."""
        self._write(format_report(replace(self.read(), last=last)))

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self._run, name="k8s-ai-usage", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.report()
            except (OSError, ValueError):
                return  # the log is gone: the step goes on unmeasured
            self._stop.wait(self.interval_s)


def _stderr_copy() -> Callable[[str], object]:
    fd = os.dup(2)
    return lambda line: os.write(fd, line.encode())


def pod_main(argv: Sequence[str]) -> int:
    """Start the reporter, then run `-m MODULE ARGS...` or `-c CODE ARGS...` in this process,
    as python would (the step's exit is ours)."""
    if len(argv) < 2 or argv[0] not in ("-m", "-c"):
        print(f"usage: -m MODULE | -c CODE [ARGS...]; got {list(argv)}", file=sys.stderr)
        return 2
    interval = float(os.environ.get(USAGE_INTERVAL_S) or DEFAULT_INTERVAL_S)
    reporter = UsageReporter(interval, _stderr_copy())
    reporter.start()
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = ["-c", *argv[2:]]
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
    finally:
        reporter.stop()
        try:
            reporter.report(last=True)  # the CPU time the step ends with
        except (OSError, ValueError):
            pass
    return 0


__all__ = ["DEFAULT_INTERVAL_S", "UsageReporter", "pod_main"]
