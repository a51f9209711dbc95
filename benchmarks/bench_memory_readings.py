"""How fast the executor sees a running step's memory change: the step's own reports through
its log (`steppod`, no permission beyond `pods/log`) against the kubelet summary through the
node proxy (`get nodes/proxy`).

One pod runs `steppod` around a program that adds 256 MiB every 3.37 s, five times, printing the
wall time each step starts. The benchmark follows the pod's log (`LogFollower`, as the backend
does) and polls the node's `/stats/summary` every 100 ms, and prints for each source the
delay from each step to the first reading that shows it (median and worst).

Note: the node agent (and the emulator) compute the summary when it is asked for; a real
kubelet serves cAdvisor's cached stats, refreshed every 10-15 s.

Run: `python -m benchmarks.bench_memory_readings [--plane emulator|kubernetes] [--interval S]`
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from kubernetes.client import CoreV1Api

from k8s_ai_orchestrator.backends.kubernetes.growth import in_use
from k8s_ai_orchestrator.backends.kubernetes.logs import LogFollower
from k8s_ai_orchestrator.backends.kubernetes.reporting import STEP_POD_MAIN

from .k8s_runs import NAMESPACE, control_plane_tenant, emulator_tenant

MiB = 1024**2
JUMPS, JUMP_MIB, GAP_S = 5, 256, 3.37  # a gap out of step with the reports
PROGRAM = f"""
import time
blocks = []
time.sleep(4)
for i in range({JUMPS}):
    start = time.time()
    block = bytearray({JUMP_MIB} << 20)
    block[::4096] = b"x" * len(block[::4096])
    blocks.append(block)
    print("JUMP", i, start, flush=True)
    time.sleep({GAP_S})
"""


def _pod(interval_s: float) -> dict[str, object]:
    return {
        "metadata": {"name": "memory-readings"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "step",
                    "image": "ghcr.io/acme/bench:1",
                    "args": [sys.executable, "-c", STEP_POD_MAIN, "-c", PROGRAM],
                    "env": [{"name": "K8S_AI_USAGE_INTERVAL_S", "value": str(interval_s)}],
                    "resources": {"limits": {"memory": "4Gi", "cpu": "1"}},
                }
            ],
        },
    }


def measure(kubeconfig: str, interval_s: float) -> dict[str, list[float]]:
    from kubernetes.config import new_client_from_config

    core = CoreV1Api(new_client_from_config(kubeconfig))
    core.create_namespaced_pod(NAMESPACE, _pod(interval_s))
    pod = core.read_namespaced_pod("memory-readings", NAMESPACE)
    while pod.status.phase == "Pending":
        time.sleep(0.1)
        pod = core.read_namespaced_pod("memory-readings", NAMESPACE)
    node = pod.spec.node_name
    follower = LogFollower(core, NAMESPACE, "memory-readings")
    seen: dict[str, list[tuple[float, int]]] = {"self-report": [], "node stats": []}
    jumps: dict[int, float] = {}
    deadline = time.time() + 6 + JUMPS * GAP_S + 20
    while time.time() < deadline and (len(jumps) < JUMPS or time.time() < jumps[JUMPS - 1] + GAP_S):
        now = time.time()
        report = follower.last_report
        if report is not None:
            seen["self-report"].append((now, report.working_set_bytes))
        answer = core.connect_get_node_proxy_with_path(
            node, "stats/summary", _preload_content=False
        )
        used = in_use(json.loads(answer.data), NAMESPACE, "memory-readings")
        if used:
            seen["node stats"].append((time.time(), used))
        log, _ = follower.read_since(0)
        for line in log.splitlines():
            if line.startswith("JUMP "):
                _, i, at = line.split()
                jumps[int(i)] = float(at)
        time.sleep(0.1)
    follower.close()
    core.delete_namespaced_pod("memory-readings", NAMESPACE, grace_period_seconds=0)
    delays: dict[str, list[float]] = {}
    for source, readings in seen.items():
        base = min(r for t, r in readings if t < jumps[0]) if readings else 0
        delays[source] = []
        for i, at in sorted(jumps.items()):
            threshold = base + (i + 0.5) * JUMP_MIB * MiB
            first = next((t for t, r in readings if t >= at and r >= threshold), None)
            if first is not None:
                delays[source].append(first - at)
    return delays


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plane", choices=("emulator", "kubernetes"), default="emulator")
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        start = control_plane_tenant if args.plane == "kubernetes" else emulator_tenant
        with start(Path(work)) as kubeconfig:
            delays = measure(kubeconfig, args.interval)
    print(f"{args.plane}, K8S_AI_USAGE_INTERVAL_S={args.interval}, {JUMPS} steps of {JUMP_MIB} MiB")
    for source, values in delays.items():
        if values:
            median = statistics.median(values)
            print(
                f"  {source:12s} seen {len(values)}/{JUMPS}: median {median:.2f} s, "
                f"worst {max(values):.2f} s"
            )
        else:
            print(f"  {source:12s} seen 0/{JUMPS}")


if __name__ == "__main__":
    main()
