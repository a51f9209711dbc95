"""A stand-in for a step process: writes the events `dagster api execute_step` writes, cheaply.

A real step process costs about 2 s of CPU (importing Dagster and the code location), which
on a 2-core machine would measure the step processes, not the run worker. `bench_scale` runs
this script in every step's pod instead, for both executors, so the run worker sees what it
would see from a real step and nothing else differs. It imports only the standard library
(started as `python -S standin_step.py ...`, about 20 ms of CPU) and:

1. takes the run id and step key from the same arguments a step process gets:
   `... api execute_step --compressed-input-json ARGS` (ai_executor) or the
   `DAGSTER_COMPRESSED_EXECUTE_STEP_ARGS` variable (dagster-k8s); ARGS is Dagster's
   `ExecuteStepArgs`, serialized, zlib-compressed and base64-encoded;
2. writes `{"started": t}` to `$BENCH_MARKS/<step>.json` (launch -> running is measured to
   here; a real step's op code starts ~2 s later);
3. inserts the events a real step process wrote for one step of the same job, recorded by a
   calibration run (`$BENCH_STANDIN_EVENTS`: a JSON list of serialized `EventLogEntry`
   records with the run id, step key, process id and timestamp left open) into the run's
   SQLite event log shard, `<base_dir>/<run id>.db` of the instance the step args name:
   STEP_WORKER_STARTED, RESOURCE_INIT_STARTED/SUCCESS, LOGS_CAPTURED and STEP_START in one
   transaction, then, after `$BENCH_STEP_SECONDS`, STEP_OUTPUT and STEP_SUCCESS in another;
4. exits 0.

It does not write compute-log files, print the step's console log lines, or report memory
usage; the pods' log streams are still opened by `ai_executor` and carry nothing.

Example (what the bench does for a pod):
    `python -S benchmarks/standin_step.py dagster api execute_step` with
    DAGSTER_COMPRESSED_EXECUTE_STEP_ARGS, BENCH_MARKS and BENCH_STANDIN_EVENTS set.
"""

import base64
import datetime
import json
import os
import re
import sqlite3
import sys
import time
import zlib

# The events before this one (inclusive) are written when the stand-in starts; the rest after
# BENCH_STEP_SECONDS, as the op's compute would sit between them.
LAST_EVENT_BEFORE_COMPUTE = "STEP_START"


def step_args(argv: list[str], env: dict[str, str]) -> dict:
    """The decoded `ExecuteStepArgs` (a JSON object) from argv or the environment.

    Example:
        >>> packed = base64.b64encode(zlib.compress(b'{"pipeline_run_id": "r"}')).decode()
        >>> step_args(["api", "execute_step", "--compressed-input-json", packed], {})
        {'pipeline_run_id': 'r'}
    """
    packed = env.get("DAGSTER_COMPRESSED_EXECUTE_STEP_ARGS", "")
    if "--compressed-input-json" in argv:
        packed = argv[argv.index("--compressed-input-json") + 1]
    if not packed:
        raise SystemExit("standin_step: no --compressed-input-json nor DAGSTER_COMPRESSED_...")
    return json.loads(zlib.decompress(base64.b64decode(packed)))


def event_log_shard(args: dict, run_id: str) -> str:
    """The run's SQLite shard, from the instance the step args name (as a step process finds
    it; dagster-k8s points DAGSTER_HOME elsewhere in its pods).

    Example:
        >>> ref = {"event_storage_data": {"class_name": "SqliteEventLogStorage",
        ...        "config_yaml": "base_dir: /home/history/runs/\\n"}}
        >>> event_log_shard({"instance_ref": ref}, "r1")
        '/home/history/runs/r1.db'
    """
    storage = (args.get("instance_ref") or {}).get("event_storage_data") or {}
    if storage.get("class_name") != "SqliteEventLogStorage":
        raise SystemExit(f"standin_step: only SQLite event logs are supported, not {storage}")
    found = re.search(r"^base_dir:\s*(.+?)\s*$", storage["config_yaml"], re.MULTILINE)
    if found is None:
        raise SystemExit(f"standin_step: no base_dir in {storage['config_yaml']!r}")
    return os.path.join(found.group(1).strip("'\""), f"{run_id}.db")


def rows(templates: list[str], run_id: str, step_key: str, pid: int) -> list[tuple]:
    """`event_logs` rows (run_id, event, dagster_event_type, timestamp, step_key) for now."""
    out = []
    for template in templates:
        now = time.time()
        text = (
            template.replace("__RUN_ID__", run_id)
            .replace("__STEP_KEY__", step_key)
            .replace('"__PID_NUMBER__"', str(pid))
            .replace("__PID__", str(pid))
            .replace('"__TS__"', repr(now))
        )
        event = json.loads(text)
        dagster_event = event.get("dagster_event") or {}
        stamp = datetime.datetime.fromtimestamp(now, datetime.UTC).replace(tzinfo=None)
        out.append(
            (
                run_id,
                text,
                dagster_event.get("event_type_value"),
                stamp.isoformat(sep=" "),
                dagster_event.get("step_key", event.get("step_key")),
            )
        )
    return out


def write(db: str, batch: list[tuple]) -> None:
    """One transaction into the run's event log shard, waiting out other writers' locks."""
    connection = sqlite3.connect(db, timeout=120)
    try:
        with connection:
            connection.executemany(
                "INSERT INTO event_logs (run_id, event, dagster_event_type, timestamp, step_key)"
                " VALUES (?, ?, ?, ?, ?)",
                batch,
            )
    finally:
        connection.close()


def main() -> None:
    started = time.time()
    env = dict(os.environ)
    args = step_args(sys.argv[1:], env)
    run_id = args["pipeline_run_id"]
    (step_key,) = args["step_keys_to_execute"]
    marks = env.get("BENCH_MARKS")
    if marks:
        with open(os.path.join(marks, f"{step_key}.json"), "w") as out:
            json.dump({"started": started, "ended": started}, out)
    with open(env["BENCH_STANDIN_EVENTS"]) as source:
        templates = json.load(source)
    types = [json.loads(t)["dagster_event"]["event_type_value"] for t in templates]
    split = types.index(LAST_EVENT_BEFORE_COMPUTE) + 1
    db = event_log_shard(args, run_id)
    write(db, rows(templates[:split], run_id, step_key, os.getpid()))
    time.sleep(float(env.get("BENCH_STEP_SECONDS", "0")))
    write(db, rows(templates[split:], run_id, step_key, os.getpid()))


if __name__ == "__main__":
    main()
