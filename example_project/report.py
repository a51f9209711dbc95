"""A short text summary of a finished run: each step's backend, size, attempts and usage."""

from __future__ import annotations

from dagster import DagsterEventType, DagsterInstance


def print_summary(instance: DagsterInstance, run_id: str) -> None:
    """Print one line per step from the executor's engine events, then the run status."""
    run = instance.get_run_by_id(run_id)
    print(f"\nRun {run_id[:8]}: {run.status.value if run else 'unknown'}")
    rows = {}
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ENGINE_EVENT):
        event = record.dagster_event
        if event is None or not event.step_key:
            continue
        meta = event.engine_event_data.metadata
        if "k8s_ai/cpu_seconds" in meta:
            rows[event.step_key] = {k.split("/", 1)[1]: v.value for k, v in meta.items()}
        elif event.message and event.message.startswith("Relaunching"):
            print(f"  {event.step_key}: {event.message}")
    for step, row in rows.items():
        cost = f" cost={row['cost']:.4f} {row['currency']}" if "cost" in row else ""
        print(
            f"  {step:<18} {row['backend']:<6} size={row['size']:<6} "
            f"attempts={row['attempts']} reasons={row['reasons']:<12} "
            f"cpu-s={row['cpu_seconds']:<8} GiB-s={row['memory_gib_seconds']}{cost}"
        )
    for record in instance.all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
        mat = record.asset_materialization
        if mat and mat.asset_key.path[-1] in ("mosaic", "risk_scores"):
            meta = {k: v.value for k, v in mat.metadata.items()}
            print(f"  {mat.asset_key.to_user_string()}: {meta}")
