"""The kubelet: processes, environment, logs, memory limits, grace periods, pull failures."""

from __future__ import annotations

import threading

import pytest
from emu_support import log_contains, python_pod, read_log, terminated
from kubernetes import client

from k8s_ai_orchestrator.testing.kube import KubeEmulator

pytestmark = [pytest.mark.emulator, pytest.mark.timeout(90)]

GROW = (
    "import time\n"
    "chunks = []\n"
    "while True:\n"
    "    chunks.append(b'x' * (16 * 1024 * 1024))\n"
    "    time.sleep(0.02)\n"
)


def _phase(core: client.CoreV1Api, ns: str, name: str) -> str:
    return str(core.read_namespaced_pod(name, ns).status.phase)


def test_a_pod_runs_its_command_and_its_log_is_readable(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(ns, python_pod("hello", "print('line 1'); print('line 2')"))
    emu.wait_for(lambda: _phase(core, ns, "hello") == "Succeeded")
    assert read_log(core, "hello", ns) == "line 1\nline 2\n"
    assert read_log(core, "hello", ns, tail_lines=1) == "line 2\n"
    pod = core.read_namespaced_pod("hello", ns)
    assert (terminated(pod).exit_code, terminated(pod).reason) == (0, "Completed")
    assert pod.status.host_ip and pod.status.pod_ip and pod.status.start_time


def test_a_process_past_its_memory_limit_is_oom_killed_with_137(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(ns, python_pod("hog", GROW, memory_limit="256Mi"))
    emu.wait_for(lambda: _phase(core, ns, "hog") == "Failed", timeout=60)
    state = terminated(core.read_namespaced_pod("hog", ns))
    assert (state.reason, state.exit_code) == ("OOMKilled", 137)


def test_env_from_secrets_configmaps_and_the_downward_api(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_secret(
        ns,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="creds"), string_data={"token": "s3cr3t"}
        ),
    )
    core.create_namespaced_config_map(
        ns, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="conf"), data={"MODE": "fast"})
    )
    env = [
        client.V1EnvVar(
            name="TOKEN",
            value_from=client.V1EnvVarSource(
                secret_key_ref=client.V1SecretKeySelector(name="creds", key="token")
            ),
        ),
        client.V1EnvVar(
            name="POD",
            value_from=client.V1EnvVarSource(
                field_ref=client.V1ObjectFieldSelector(field_path="metadata.name")
            ),
        ),
        client.V1EnvVar(name="GREETING", value="hi-$(POD)"),
    ]
    pod = python_pod(
        "env",
        "import os; print(os.environ['TOKEN'], os.environ['MODE'], os.environ['GREETING'])",
        env=env,
    )
    pod.spec.containers[0].env_from = [
        client.V1EnvFromSource(config_map_ref=client.V1ConfigMapEnvSource(name="conf"))
    ]
    core.create_namespaced_pod(ns, pod)
    emu.wait_for(lambda: _phase(core, ns, "env") == "Succeeded")
    assert read_log(core, "env", ns) == "s3cr3t fast hi-env\n"


def test_a_missing_secret_is_a_create_container_config_error(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    env = [
        client.V1EnvVar(
            name="X",
            value_from=client.V1EnvVarSource(
                secret_key_ref=client.V1SecretKeySelector(name="absent", key="k")
            ),
        )
    ]
    core.create_namespaced_pod(ns, python_pod("no-secret", "pass", env=env))

    def waiting_reason() -> str | None:
        statuses = core.read_namespaced_pod("no-secret", ns).status.container_statuses or []
        return statuses[0].state.waiting.reason if statuses and statuses[0].state.waiting else None

    assert emu.wait_for(waiting_reason) == "CreateContainerConfigError"
    waiting = core.read_namespaced_pod("no-secret", ns).status.container_statuses[0].state.waiting
    assert waiting.message == 'secret "absent" not found'


def test_an_unpullable_image_goes_to_image_pull_back_off(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(ns, python_pod("bad-image", "pass", image="invalid/image:1"))

    def waiting_reason() -> str | None:
        statuses = core.read_namespaced_pod("bad-image", ns).status.container_statuses or []
        return statuses[0].state.waiting.reason if statuses and statuses[0].state.waiting else None

    emu.wait_for(lambda: waiting_reason() == "ImagePullBackOff")
    assert core.read_namespaced_pod("bad-image", ns).status.phase == "Pending"
    events = core.list_namespaced_event(ns, field_selector="involvedObject.name=bad-image").items
    assert {"Failed", "BackOff"} <= {event.reason for event in events}


def test_fallback_to_logs_on_error_puts_the_log_tail_in_the_termination_message(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    pod = python_pod("explained", "import sys; print('bad input: tile 7'); sys.exit(3)")
    pod.spec.containers[0].termination_message_policy = "FallbackToLogsOnError"
    core.create_namespaced_pod(ns, pod)
    emu.wait_for(lambda: _phase(core, ns, "explained") == "Failed")
    state = terminated(core.read_namespaced_pod("explained", ns))
    assert (state.exit_code, state.reason, state.message) == (3, "Error", "bad input: tile 7\n")


def test_deletion_sends_sigterm_and_waits_for_the_process(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str, tmp_path
) -> None:
    marker = tmp_path / "got-term"
    code = (
        "import signal, sys, time, pathlib\n"
        "def stop(*args):\n"
        f"    pathlib.Path({str(marker)!r}).write_text('x')\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)\n"
    )
    core.create_namespaced_pod(ns, python_pod("graceful", code, grace=30))
    emu.wait_for(lambda: log_contains(core, "graceful", ns, "ready"))
    core.delete_namespaced_pod("graceful", ns)
    emu.wait_for(
        lambda: not core.list_namespaced_pod(ns, field_selector="metadata.name=graceful").items
    )
    assert marker.read_text() == "x"


def test_a_process_ignoring_sigterm_is_killed_after_the_grace_period(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    core.create_namespaced_pod(ns, python_pod("stubborn", code, grace=1))
    emu.wait_for(lambda: log_contains(core, "stubborn", ns, "up"))
    before = emu.processes_alive()
    deleted = core.delete_namespaced_pod("stubborn", ns)
    assert deleted.metadata.deletion_timestamp is not None
    emu.wait_for(
        lambda: not core.list_namespaced_pod(ns, field_selector="metadata.name=stubborn").items
    )
    assert emu.processes_alive() == before - 1


def test_restart_on_failure_keeps_the_previous_log(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str, tmp_path
) -> None:
    counter = tmp_path / "runs"
    code = (
        "import pathlib, sys\n"
        f"p = pathlib.Path({str(counter)!r}); n = int(p.read_text()) if p.exists() else 0\n"
        "p.write_text(str(n + 1)); print('run', n)\n"
        "sys.exit(0 if n else 3)\n"
    )
    core.create_namespaced_pod(ns, python_pod("flaky", code, restart_policy="OnFailure"))
    emu.wait_for(lambda: _phase(core, ns, "flaky") == "Succeeded")
    status = core.read_namespaced_pod("flaky", ns).status.container_statuses[0]
    assert status.restart_count == 1 and status.last_state.terminated.exit_code == 3
    assert read_log(core, "flaky", ns, previous=True) == "run 0\n"
    assert read_log(core, "flaky", ns) == "run 1\n"


def test_follow_streams_the_log_until_the_container_exits(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    code = "import time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.2)\n"
    core.create_namespaced_pod(ns, python_pod("talker", code))
    emu.wait_for(lambda: _phase(core, ns, "talker") in ("Running", "Succeeded"))
    assert read_log(core, "talker", ns, follow=True) == "0\n1\n2\n"


def test_working_dir_is_honoured(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str, tmp_path
) -> None:
    pod = python_pod("cwd", "import os; print(os.getcwd())")
    pod.spec.containers[0].working_dir = str(tmp_path)
    core.create_namespaced_pod(ns, pod)
    emu.wait_for(lambda: _phase(core, ns, "cwd") == "Succeeded")
    assert read_log(core, "cwd", ns).strip() == str(tmp_path)


def test_a_pod_past_its_active_deadline_is_killed_with_deadline_exceeded(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(
        ns, python_pod("overdue", "import time; time.sleep(600)", active_deadline_seconds=1)
    )
    emu.wait_for(lambda: _phase(core, ns, "overdue") == "Failed")
    pod = core.read_namespaced_pod("overdue", ns)
    assert pod.status.reason == "DeadlineExceeded"
    assert terminated(pod).exit_code == 143


def test_a_pod_with_a_resource_claim_is_never_bound_no_device_being_emulated(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    """No DRA driver is emulated, so no node has a device: the scheduler says so in the real
    one's words, and the pod never runs."""
    pod = python_pod("claims", "print('ran')")
    pod.spec.resource_claims = [
        client.V1PodResourceClaim(name="gpus", resource_claim_template_name="t")
    ]
    core.create_namespaced_pod(ns, pod)

    def unschedulable() -> str | None:
        for condition in core.read_namespaced_pod("claims", ns).status.conditions or []:
            if condition.type == "PodScheduled" and condition.status == "False":
                return str(condition.message)
        return None

    assert "cannot allocate all claims" in emu.wait_for(unschedulable)
    placed = core.read_namespaced_pod("claims", ns)
    assert placed.spec.node_name is None and placed.status.phase == "Pending"


def test_a_pod_bound_with_a_resource_claim_waits_for_a_driver_the_node_lacks(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    """Bound by name past the scheduler, the pod still never runs: the kubelet has no DRA
    driver to prepare its claim (a real kubelet keeps it ContainerCreating, and warns)."""
    pod = python_pod("bound-claims", "print('ran')", node_name="node-a")
    pod.spec.resource_claims = [
        client.V1PodResourceClaim(name="gpus", resource_claim_template_name="t")
    ]
    core.create_namespaced_pod(ns, pod)

    def warned() -> list[str]:
        selector = "involvedObject.name=bound-claims"
        events = core.list_namespaced_event(ns, field_selector=selector).items
        return [e.message for e in events if e.reason == "FailedPrepareDynamicResources"]

    assert "no DRA driver is registered on this node" in " ".join(emu.wait_for(warned))
    placed = core.read_namespaced_pod("bound-claims", ns)
    (status,) = placed.status.container_statuses
    assert status.state.waiting.reason == "ContainerCreating"
    assert placed.status.phase == "Pending"


def test_a_follow_stream_its_client_left_stops_while_the_container_is_quiet(
    emu: KubeEmulator, core: client.CoreV1Api, ns: str
) -> None:
    """As the kubelet (a Go server cancels a request whose client went), not when the container
    next writes or exits: a quiet step's log stream would otherwise hold its server thread."""
    core.create_namespaced_pod(ns, python_pod("quiet", "import time; time.sleep(60)"))
    emu.wait_for(lambda: _phase(core, ns, "quiet") == "Running")
    before = _connection_threads()
    with emu.tenant("team-a").api_client() as fresh:  # a connection of its own
        follow = client.CoreV1Api(fresh).read_namespaced_pod_log
        response = follow("quiet", ns, follow=True, _preload_content=False)
        emu.wait_for(lambda: _connection_threads() > before, timeout=10)

        response.close()  # the client goes; the container has written nothing

        emu.wait_for(lambda: _connection_threads() <= before, timeout=5)
    core.delete_namespaced_pod("quiet", ns, grace_period_seconds=0)


def _connection_threads() -> int:
    """The emulator's threads serving a connection now (one per open connection)."""
    return sum(1 for t in threading.enumerate() if "process_request_thread" in t.name)
