"""A step's own memory reports: the kubelet's working set from real cgroup files, the report
line taken out of a streamed log however it is cut, and the reporter in a real process."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from k8s_ai_orchestrator import steppod
from k8s_ai_orchestrator.backends.kubernetes.reporting import STEP_POD_MAIN
from k8s_ai_orchestrator.usage_report import (
    MemoryReading,
    ReportFilter,
    cgroup_usage,
    format_report,
    without_reports,
    working_set_v1,
    working_set_v2,
)

# memory.stat of a cgroup v2 container (kernel 6.1; trimmed to the first lines and the file LRUs)
V2_STAT = """anon 157286400
file 52428800
kernel 2949120
kernel_stack 196608
pagetables 1114112
sock 0
shmem 0
file_mapped 25165824
file_dirty 0
file_writeback 0
inactive_anon 157118464
active_anon 167936
inactive_file 31457280
active_file 20971520
unevictable 0
"""
# memory.stat of a cgroup v1 memory cgroup (read on the test machine, kernel 6.x)
V1_STAT = """cache 2523136
rss 2072576
rss_huge 0
inactive_anon 1970176
active_anon 12288
inactive_file 528384
active_file 1994752
hierarchical_memory_limit 9223372036854771712
total_cache 2523136
total_rss 2072576
total_inactive_anon 1970176
total_active_anon 12288
total_inactive_file 528384
total_active_file 1994752
"""


@pytest.mark.parametrize(
    ("compute", "usage", "stat", "expected"),
    [
        (working_set_v2, "212340736\n", V2_STAT, 212340736 - 31457280),
        (working_set_v2, "1000\n", V2_STAT, 0),  # more inactive cache than usage: never below 0
        (working_set_v2, "4096\n", "anon 4096\n", 4096),  # no file LRU line: nothing to subtract
        (working_set_v1, "5734400\n", V1_STAT, 5734400 - 528384),  # total_, not the local line
        (working_set_v1, "0\n", V1_STAT, 0),
    ],
)
def test_the_working_set_is_usage_less_inactive_file_as_the_kubelet_computes_it(
    compute, usage, stat, expected
) -> None:
    assert compute(usage, stat) == expected


def _cgroup_root(tmp_path: Path, proc: str, files: dict[str, str]) -> Path:
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/cgroup").write_text(proc)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("proc", "files", "expected"),
    [
        (  # a v2 container with its own cgroup namespace: its cgroup is the mount
            "0::/\n",
            {
                "sys/fs/cgroup/memory.max": "1073741824\n",
                "sys/fs/cgroup/memory.current": "212340736\n",
                "sys/fs/cgroup/memory.stat": V2_STAT,
            },
            MemoryReading(212340736 - 31457280, "cgroup v2", 0.0),
        ),
        (  # v2 without a namespace: the path under the mount
            "0::/kubepods/burstable/pod1/c1\n",
            {
                "sys/fs/cgroup/kubepods/burstable/pod1/c1/memory.max": "536870912\n",
                "sys/fs/cgroup/kubepods/burstable/pod1/c1/memory.current": "212340736\n",
                "sys/fs/cgroup/kubepods/burstable/pod1/c1/memory.stat": V2_STAT,
            },
            MemoryReading(212340736 - 31457280, "cgroup v2", 0.0),
        ),
        (  # v1 (the test machines' kubelet): the memory controller's line
            "4:memory:/kubepods/pod1/c1\n0::/\n",
            {
                "sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes": "1073741824\n",
                "sys/fs/cgroup/memory/kubepods/pod1/c1/memory.usage_in_bytes": "5734400\n",
                "sys/fs/cgroup/memory/kubepods/pod1/c1/memory.stat": V1_STAT,
            },
            MemoryReading(5734400 - 528384, "cgroup v1", 0.0),
        ),
        (  # a plain process of the node agent: v1 with no limit, not the container's own
            "4:memory:/process_api/0efd\n0::/\n",
            {
                "sys/fs/cgroup/memory/process_api/0efd/memory.limit_in_bytes": (
                    "9223372036854771712\n"
                ),
                "sys/fs/cgroup/memory/process_api/0efd/memory.usage_in_bytes": "5734400\n",
                "sys/fs/cgroup/memory/process_api/0efd/memory.stat": V1_STAT,
            },
            None,
        ),
        (  # v2 with no limit
            "0::/\n",
            {
                "sys/fs/cgroup/memory.max": "max\n",
                "sys/fs/cgroup/memory.current": "212340736\n",
                "sys/fs/cgroup/memory.stat": V2_STAT,
            },
            None,
        ),
        ("0::/\n", {}, None),  # no cgroup files at all
    ],
)
def test_only_a_cgroup_of_the_containers_own_with_a_limit_is_read(
    tmp_path: Path, proc: str, files: dict[str, str], expected: MemoryReading | None
) -> None:
    assert cgroup_usage(_cgroup_root(tmp_path, proc, files)) == expected


READING = MemoryReading(83886080, "cgroup v2", 1733.5)
LOG = "step starts\n" + format_report(READING) + "half a line, " + format_report(READING) + "end\n"


def test_reports_are_taken_out_of_the_log_wherever_the_stream_is_cut() -> None:
    data = LOG.encode()
    for cut in range(len(data) + 1):
        report_filter = ReportFilter()
        kept_a, first = report_filter.feed(data[:cut])
        kept_b, second = report_filter.feed(data[cut:])
        assert kept_a + kept_b + report_filter.flush() == b"step starts\nhalf a line, end\n"
        assert first + second == [READING, READING]


def test_ordinary_output_is_not_held_back_and_a_line_that_only_looks_like_a_report_stays() -> None:
    report_filter = ReportFilter()
    assert report_filter.feed(b"progress 10%") == (b"progress 10%", [])
    assert report_filter.feed(b"\n@k8s-ai") == (b"\n", [])  # could become a report: held
    assert report_filter.feed(b"-usage not json\n") == (b"@k8s-ai-usage not json\n", [])
    assert without_reports("a\n@k8s-ai-usage {}\n") == "a\n@k8s-ai-usage {}\n"


def test_a_reporting_step_process_runs_its_code_keeps_its_exit_and_reports_on_stderr() -> None:
    code = "import sys; print('hello', sys.argv[1:], flush=True); import time; time.sleep(1.5)"
    env = dict(os.environ, K8S_AI_USAGE_INTERVAL_S="0.2")
    done = subprocess.run(
        [sys.executable, "-c", STEP_POD_MAIN, "-c", code + "; sys.exit(3)", "x"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3
    assert done.stdout == "hello ['x']\n"
    report_filter = ReportFilter()
    kept, readings = report_filter.feed(done.stderr.encode())
    assert kept == b"" and len(readings) >= 3
    assert all(r.working_set_bytes > 10 * 1024**2 for r in readings)
    assert readings[0].source in ("cgroup v2", "cgroup v1", "process tree")


def test_the_step_pod_reporter_does_not_import_dagster() -> None:
    """A small `python -c` program that reports its memory must not start at Dagster's size."""
    import subprocess
    import sys

    probe = (  # VmHWM: this program's peak (ru_maxrss would count the forking pytest's)
        "import sys, k8s_ai_orchestrator.steppod\n"
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "print('dagster' in sys.modules, hwm.split()[1])"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    imported, peak_kib = out.stdout.split()
    assert imported == "False"
    assert int(peak_kib) < 64 * 1024  # about 20 MiB here; with Dagster about 140 MiB


@pytest.mark.parametrize(
    ("proc", "files", "cpu"),
    [
        (  # v2: usage_usec of the container's cpu.stat
            "0::/\n",
            {
                "sys/fs/cgroup/memory.max": "1073741824\n",
                "sys/fs/cgroup/memory.current": "212340736\n",
                "sys/fs/cgroup/memory.stat": V2_STAT,
                "sys/fs/cgroup/cpu.stat": "usage_usec 12500000\nuser_usec 10000000\n",
            },
            12.5,
        ),
        (  # v1: cpuacct.usage (nanoseconds) of the cpu,cpuacct controller's cgroup
            "5:cpu,cpuacct:/kubepods/pod1/c1\n4:memory:/kubepods/pod1/c1\n0::/\n",
            {
                "sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes": "1073741824\n",
                "sys/fs/cgroup/memory/kubepods/pod1/c1/memory.usage_in_bytes": "5734400\n",
                "sys/fs/cgroup/memory/kubepods/pod1/c1/memory.stat": V1_STAT,
                "sys/fs/cgroup/cpu,cpuacct/kubepods/pod1/c1/cpuacct.usage": "3250000000\n",
            },
            3.25,
        ),
        (  # v1 without a readable cpuacct: memory only
            "4:memory:/kubepods/pod1/c1\n0::/\n",
            {
                "sys/fs/cgroup/memory/kubepods/pod1/c1/memory.limit_in_bytes": "1073741824\n",
                "sys/fs/cgroup/memory/kubepods/pod1/c1/memory.usage_in_bytes": "5734400\n",
                "sys/fs/cgroup/memory/kubepods/pod1/c1/memory.stat": V1_STAT,
            },
            None,
        ),
    ],
)
def test_the_cpu_time_is_the_containers_cgroups_as_the_kubelet_reads_it(
    tmp_path: Path, proc: str, files: dict[str, str], cpu: float | None
) -> None:
    reading = cgroup_usage(_cgroup_root(tmp_path, proc, files))
    assert reading is not None and reading.cpu_seconds == cpu


def test_a_report_carries_the_cpu_time_and_one_without_it_still_parses() -> None:
    with_cpu = MemoryReading(1, "cgroup v1", 2.0, cpu_seconds=3.5)
    _, readings = ReportFilter().feed(format_report(with_cpu).encode())
    assert readings == [with_cpu]
    old = b'@k8s-ai-usage {"working_set_bytes":1,"source":"cgroup v1","at":2.0}\n'
    assert ReportFilter().feed(old)[1] == [MemoryReading(1, "cgroup v1", 2.0)]


def test_a_step_without_a_cgroup_of_its_own_reports_its_process_trees_cpu_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The node agent and the emulator run containers as plain processes (no cgroup of their
    own): the reporter counts this process's CPU time (its reaped children's too) and its live
    children's."""
    monkeypatch.setattr(steppod, "cgroup_usage", lambda: None)
    child = subprocess.Popen(
        [sys.executable, "-c", "import time\nwhile time.process_time() < 0.5: pass\ntime.sleep(30)"]
    )
    try:
        lines: list[str] = []
        reporter = steppod.UsageReporter(interval_s=1.0, write=lines.append)
        deadline = time.monotonic() + 20
        while True:
            reading = reporter.read()
            assert reading.source == "process tree" and reading.cpu_seconds is not None
            if reading.cpu_seconds >= time.process_time() + 0.5 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert reading.cpu_seconds >= time.process_time() + 0.5  # its own and the child's
        reporter.report()
        (report,) = ReportFilter().feed(lines[0].encode())[1]
        assert report.cpu_seconds == pytest.approx(reading.cpu_seconds, abs=0.5)
    finally:
        child.kill()
        child.wait()
