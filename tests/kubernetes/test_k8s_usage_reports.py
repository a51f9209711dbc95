"""Growth from the step's own memory reports: a reporting pod needs no node stats, a silent one
falls back to them (unless it reports for its figures only); the argv that makes a step report;
and on the emulator, a step grown in place while the tenant refuses `get nodes/proxy` (the
tenant chart's default), and a priced step's used figures from its reports, without growth."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from k8s_support import TENANTS, python_step, tenant_config, wait_terminal, wait_until
from test_k8s_growth import POLICY, FakeCore, growth, memory, pod

from k8s_ai_orchestrator.backends.base import GrowOutcome, StepState
from k8s_ai_orchestrator.backends.kubernetes import KubernetesBackend, KubernetesConfig
from k8s_ai_orchestrator.backends.kubernetes.growth import REPORT_GRACE_S
from k8s_ai_orchestrator.backends.kubernetes.reporting import STEP_POD_MAIN, report_usage
from k8s_ai_orchestrator.memorygrowth import MemoryGrowth
from k8s_ai_orchestrator.usage_report import MemoryReading
from tests.support import FakeClock

MiB, GiB = 1024**2, 1024**3


def reporting(step: str = "run-1/tiles") -> Any:
    return replace(memory(step), reports=True)


def test_a_reporting_pod_grows_from_its_reports_without_asking_for_node_stats(
    clock: FakeClock,
) -> None:
    core, state = FakeCore(used=0, stats_error=403), reporting()
    grower = growth(clock, POLICY)
    grower.observe(core, "team-a", pod(), state, MemoryReading(500 * MiB, "cgroup v2", 1.0))
    assert not core.resizes  # under 85% of 1Gi
    grower.observe(core, "team-a", pod(), state, MemoryReading(900 * MiB, "cgroup v2", 1.2))
    assert core.resizes and core.stats_reads == 0
    assert state.peak_bytes == 900 * MiB and state.resizes == []  # no refusal noted


def test_a_report_is_used_once_and_a_silent_reporting_pod_falls_back_to_node_stats(
    clock: FakeClock,
) -> None:
    core, state = FakeCore(used=700 * MiB), reporting()
    grower = growth(clock, None)
    grower.observe(core, "team-a", pod(), state)
    clock.advance(REPORT_GRACE_S - 1)
    grower.observe(core, "team-a", pod(), state)
    assert core.stats_reads == 0 and state.peak_bytes == 0  # still waiting for its first report
    clock.advance(1)
    grower.observe(core, "team-a", pod(), state)
    assert core.stats_reads == 1 and state.peak_bytes == 700 * MiB


def test_a_pod_reporting_for_its_figures_only_never_falls_back_to_node_stats(
    clock: FakeClock,
) -> None:
    """A priced step (no growth, no `memory="auto"`) is measured from its reports alone: node
    stats cost a request a second and `nodes/proxy`, which a figure is not worth."""
    core, state = FakeCore(used=700 * MiB), replace(reporting(), samples=False)
    grower = growth(clock, None)
    grower.observe(core, "team-a", pod(), state)
    clock.advance(REPORT_GRACE_S + 5)
    grower.observe(core, "team-a", pod(), state)
    assert core.stats_reads == 0 and state.peak_bytes == 0
    grower.observe(core, "team-a", pod(), state, MemoryReading(300 * MiB, "cgroup v2", 1.0))
    assert core.stats_reads == 0 and state.peak_bytes == 300 * MiB


def _args(command: list[str], raw: bool = False, **config: Any) -> list[str]:
    manifest = {"spec": {"template": {"spec": {"containers": [{"args": ["unchanged"]}]}}}}
    request = replace(python_step("pass"), command=command, raw_command=raw)
    report_usage(manifest, request, KubernetesConfig.from_dict(config))
    return list(manifest["spec"]["template"]["spec"]["containers"][0]["args"])


@pytest.mark.parametrize(
    ("command", "raw", "config", "expected"),
    [
        (
            ["py", "-m", "dagster", "api"],
            False,
            {},
            ["python", "-c", STEP_POD_MAIN, "-m", "dagster", "api"],
        ),
        (
            ["py", "-m", "dagster", "api"],
            False,
            {"command_prefix": ["/venv/bin/python", "-m", "dagster"]},
            ["/venv/bin/python", "-c", STEP_POD_MAIN, "-m", "dagster", "api"],
        ),
        (
            ["py", "-m", "dagster", "api"],
            False,
            {"command_prefix": ["/venv/bin/dagster"]},
            ["unchanged"],
        ),
        (
            ["py", "-c", "pass"],
            False,
            {"python": "/venv/bin/python"},
            ["/venv/bin/python", "-c", STEP_POD_MAIN, "-c", "pass"],
        ),
        (["py", "-c", "pass"], True, {}, ["unchanged"]),  # the user's argv as it is
        (["/bin/sh", "script.sh", "x"], False, {}, ["unchanged"]),
    ],
)
def test_only_python_step_commands_start_through_the_reporter(
    command: list[str], raw: bool, config: dict[str, Any], expected: list[str]
) -> None:
    assert _args(command, raw, **config) == expected


GROWER = (
    "import time; blocks = []\n"
    "for _ in range(48): blocks.append(bytearray(16 << 20)); time.sleep(0.15)\n"
    "time.sleep(2)"
)


@pytest.mark.slow
def test_on_a_tenant_refusing_node_proxy_a_reporting_step_grows_in_place(emulator: Any) -> None:
    """The tenant answers `get nodes/proxy` with 403 (the chart's default): the step's own
    reports, read from its log, still grow it 512Mi → 1Gi → 2Gi before its OOM, in one pod."""
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emulator)),
        allowed_tenants=TENANTS,
        sleep=lambda s: None,
        growth=MemoryGrowth(grow_at=0.6, factor=2.0, max_memory_bytes=2 * GiB),
    )
    emulator.set_permission("team-a", "get", "nodes/proxy", allowed=False)
    try:
        step = python_step(GROWER, memory="512Mi")
        step = replace(step, env={**step.env, "K8S_AI_USAGE_INTERVAL_S": "0.2"})
        handle = backend.submit(step)
        status = wait_terminal(emulator, backend, handle)
        resizes = backend.resizes(handle)
        text, _ = backend.logs_since(handle)
    finally:
        emulator.set_permission("team-a", "get", "nodes/proxy", allowed=True)
        backend.close()
    assert status.state == StepState.SUCCEEDED, (status, resizes)
    accepted = [(r.old_bytes, r.new_bytes) for r in resizes if r.outcome is GrowOutcome.ACCEPTED]
    assert accepted == [(512 * MiB, GiB), (GiB, 2 * GiB)], resizes
    assert not any(r.outcome is GrowOutcome.REFUSED for r in resizes)
    assert "@k8s-ai-usage" not in text and "@k8s-ai-usage" not in backend.logs(handle)


HOLDER = (
    "import time; block = bytearray(96 << 20)\n"
    "end = time.process_time() + 0.6\n"
    "while time.process_time() < end: pass\n"
    "time.sleep(1.5)"
)


@pytest.mark.slow
@pytest.mark.parametrize("priced", [True, False])
def test_a_priced_step_reports_what_it_used_without_growth_or_node_stats(
    emulator: Any, priced: bool
) -> None:
    """With `prices` set (the request's `measure_usage`), a single-pod step starts through the
    reporter and its attempt's usage carries the peak memory and CPU time it reported, while
    the tenant refuses `get nodes/proxy`; without prices it is not measured (no figures)."""
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emulator)),
        allowed_tenants=TENANTS,
        sleep=lambda s: None,
    )
    emulator.set_permission("team-a", "get", "nodes/proxy", allowed=False)
    try:
        step = replace(python_step(HOLDER, memory="512Mi"), measure_usage=priced)
        step = replace(step, env={**step.env, "K8S_AI_USAGE_INTERVAL_S": "0.2"})
        handle = backend.submit(step)
        status = wait_terminal(emulator, backend, handle)
        usage = backend.usage(handle)
        text = backend.logs(handle)
    finally:
        emulator.set_permission("team-a", "get", "nodes/proxy", allowed=True)
        backend.close()
    assert status.state == StepState.SUCCEEDED, status
    assert "@k8s-ai-usage" not in text
    if not priced:
        assert usage.max_rss_bytes is None and usage.cpu_used_seconds is None, usage
        return
    assert usage.max_rss_bytes is not None and usage.max_rss_bytes >= 96 * MiB, usage
    assert usage.cpu_used_seconds is not None and usage.cpu_used_seconds >= 0.6, usage


@pytest.mark.slow
def test_a_reporting_pods_log_is_streamed_once_through_its_end(emulator: Any) -> None:
    """A measured step's log stream ends after the step's last report: the executor's reads of
    the ended attempt (its last one waits for the stream's end) open no second stream, which
    would only send the whole log again."""
    backend = KubernetesBackend(
        KubernetesConfig.from_dict(tenant_config(emulator)),
        allowed_tenants=TENANTS,
        sleep=lambda s: None,
    )
    try:
        step = replace(
            python_step("import time; print('epoch 1'); time.sleep(1)"), measure_usage=True
        )
        handle = backend.submit(step)
        wait_until(emulator, backend, handle, lambda s: s.state == StepState.RUNNING)
        emulator.reset_request_counts()  # the stream may be open already: growth reads it
        text, offset = backend.logs_since(handle, 0)
        wait_terminal(emulator, backend, handle)
        for _ in range(3):  # the ended attempt's reads: the handler's, the tail's, the run's end
            more, offset = backend.logs_since(handle, offset)
            text += more
        streams = emulator.request_counts("team-a")[("get", "pods/log")]
    finally:
        backend.close()
    assert "epoch 1" in text and "@k8s-ai-usage" not in text, text
    assert streams <= 1, emulator.request_counts()  # opened before, or by the first read
