"""`make demo`: materialize the example pipeline on the embedded local backend.

Runs the `vegetation_risk` job with `ai_executor` against a real Dagster instance in
`.demo/home`, then prints where each step ran, with what size, and how many attempts it took.
`--preempt` (or VEGETATION_PREEMPT_AT=<unit>) sends SIGTERM to the mosaic step half-way, as a
cluster reclaiming its node would, and shows it resume from its last checkpoint.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import threading
import time
from pathlib import Path

DEMO_DIR = Path(".demo").resolve()
# Illustrative on-demand prices, so the summary and `k8s-ai cost` show money (docs/cost.md).
DEMO_PRICES = {"cpu_hour": 0.04, "memory_gib_hour": 0.005, "gpu_hour": 2.5, "currency": "USD"}


def _preempter(marker: Path, stop: threading.Event) -> None:
    """Wait for the mosaic to announce its pid, then SIGTERM it from outside."""
    while not stop.is_set():
        if marker.exists():
            pid = int(marker.read_text())
            marker.unlink()
            print(f"  [demo] preempting the mosaic step process (pid {pid}) with SIGTERM")
            os.kill(pid, signal.SIGTERM)
            return
        time.sleep(0.05)


def _prepare_environment(preempt: bool) -> None:
    shutil.rmtree(DEMO_DIR, ignore_errors=True)
    home = DEMO_DIR / "home"
    home.mkdir(parents=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = str(home)
    os.environ["VEGETATION_INBOX"] = str(DEMO_DIR / "inbox")
    os.environ["VEGETATION_CHECKPOINTS"] = (DEMO_DIR / "checkpoints").as_uri()
    os.environ["VEGETATION_PREEMPT_MARKER"] = str(DEMO_DIR / "preempt-me")
    os.environ["VEGETATION_REPORTS"] = str(DEMO_DIR / "reports")
    if preempt:
        os.environ.setdefault("VEGETATION_PREEMPT_AT", "16")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--preempt", action="store_true", help="preempt the mosaic mid-way")
    args = parser.parse_args(argv)
    _prepare_environment(args.preempt or "VEGETATION_PREEMPT_AT" in os.environ)

    from dagster import DagsterInstance, execute_job
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    from .report import print_summary
    from .scenes import REGIONS, drop_scene

    for seed, region in enumerate(REGIONS, start=100):
        drop_scene(region, seed)
    repo = ReconstructableRepository.for_module(
        "example_project.definitions", "defs", working_directory=os.getcwd()
    )
    job = repo.get_reconstructable_job("vegetation_risk")
    stop = threading.Event()
    watcher = threading.Thread(
        target=_preempter, args=(Path(os.environ["VEGETATION_PREEMPT_MARKER"]), stop), daemon=True
    )
    watcher.start()
    print("Materializing vegetation_risk on the local backend ...")
    with DagsterInstance.get() as instance:
        run_config = {
            "loggers": {"console": {"config": {"log_level": "WARNING"}}},
            "execution": {"config": {"prices": DEMO_PRICES}},
        }
        result = execute_job(job, instance=instance, run_config=run_config)
        stop.set()
        print_summary(instance, result.run_id)
    print(f"What it cost, by asset: DAGSTER_HOME={os.environ['DAGSTER_HOME']} k8s-ai cost")
    return 0 if result.success else 1


if __name__ == "__main__":
    sys.exit(main())
