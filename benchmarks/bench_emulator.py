"""Kubernetes emulator throughput with the official client.

Run: `python -m benchmarks.bench_emulator [--objects 300] [--threads 4]`

Printed, per mix: requests per second the emulator sustained (target >= 200 on 2 cores, so
that the emulator is never the bottleneck of the executor benchmarks):
1. create: configmaps, one client thread per `--threads`;
2. get: reads of those configmaps;
3. list: namespace lists of `--objects` configmaps (each response carries all of them);
4. mixed: create/get/list/patch in rotation, pending pods included (the scheduler explains
   each one), from `--threads` threads;
5. watch: events per second delivered to one watcher while configmaps are created.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client, watch

from k8s_ai_orchestrator.testing.kube import KubeEmulator, NodeSpec


def _timed(label: str, count: int, threads: int, work: Callable[[int], object]) -> float:
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(work, range(count)))
    rate = count / (time.perf_counter() - started)
    print(f"{label:<8} {count:>6} requests  {rate:>8.0f} requests/s")
    return rate


def _configmap(name: str) -> client.V1ConfigMap:
    return client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name), data={"k": "v" * 64})


def _pending_pod(name: str) -> client.V1Pod:
    container = client.V1Container(name="main", image="bench", command=["true"])
    spec = client.V1PodSpec(containers=[container], node_selector={"bench": "nowhere"})
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name), spec=spec)


def _watch_rate(core: client.CoreV1Api, namespace: str, count: int) -> float:
    start = core.list_namespaced_config_map(namespace).metadata.resource_version
    received = threading.Event()
    seen = 0

    def consume() -> None:
        nonlocal seen
        stream = watch.Watch().stream(
            core.list_namespaced_config_map, namespace, resource_version=start, timeout_seconds=120
        )
        for _ in stream:
            seen += 1
            if seen == count:
                received.set()
                return

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    started = time.perf_counter()
    for index in range(count):
        core.create_namespaced_config_map(namespace, _configmap(f"watched-{index}"))
    received.wait(120)
    rate = seen / (time.perf_counter() - started)
    print(f"{'watch':<8} {seen:>6} events    {rate:>8.0f} events/s (while creating)")
    return rate


def run(objects: int, threads: int) -> dict[str, float]:
    nodes = [NodeSpec("node-a", cpu="8", memory="16Gi")]
    with KubeEmulator(nodes=nodes, tenants=["bench"]) as emu:
        core = client.CoreV1Api(emu.tenant("bench").api_client())
        for name in ("bench", "mixed", "watched"):
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        rates = {
            "create": _timed(
                "create",
                objects,
                threads,
                lambda i: core.create_namespaced_config_map("bench", _configmap(f"cm-{i}")),
            ),
            "get": _timed(
                "get",
                objects,
                threads,
                lambda i: core.read_namespaced_config_map(f"cm-{i}", "bench"),
            ),
            "list": _timed(
                "list",
                max(objects // 10, 10),
                threads,
                lambda i: core.list_namespaced_config_map("bench"),
            ),
        }

        def mixed(i: int) -> object:
            step = i % 4
            if step == 0:
                return core.create_namespaced_pod("mixed", _pending_pod(f"pod-{i}"))
            if step == 1:
                return core.read_namespaced_config_map(f"cm-{i % objects}", "bench")
            if step == 2:
                return core.list_namespaced_pod("mixed", label_selector="app!=none")
            return core.patch_namespaced_config_map(
                f"cm-{i % objects}", "bench", {"data": {"i": str(i)}}
            )

        rates["mixed"] = _timed("mixed", objects, threads, mixed)
        rates["watch"] = _watch_rate(core, "watched", objects)
    slowest = min(rates["create"], rates["get"], rates["mixed"])
    verdict = "ok" if slowest >= 200 else "BELOW TARGET"
    print(f"slowest request mix: {slowest:.0f} requests/s (target >= 200): {verdict}")
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=300)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    run(args.objects, args.threads)


if __name__ == "__main__":
    main()
