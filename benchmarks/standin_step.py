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
   event log of the instance the step args name — its SQLite shard `<base_dir>/<run id>.db`,
   or, for an instance stored in PostgreSQL, its `event_logs` table through psycopg2 (taken
   from the virtual environment's site-packages, ~20 ms more; each event with the `NOTIFY` Dagster's
   own PostgreSQL storage sends with it):
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


def event_log(args: dict, run_id: str) -> tuple[str, str]:
    """("sqlite", the run's shard) or ("postgres", the URL), from the instance the step args
    name (as a step process finds it; dagster-k8s points DAGSTER_HOME elsewhere in its pods).

    Example:
        >>> ref = {"event_storage_data": {"class_name": "SqliteEventLogStorage",
        ...        "config_yaml": "base_dir: /home/history/runs/\\n"}}
        >>> event_log({"instance_ref": ref}, "r1")
        ('sqlite', '/home/history/runs/r1.db')
        >>> ref = {"event_storage_data": {"class_name": "PostgresEventLogStorage",
        ...        "config_yaml": "postgres_url: postgresql://d@127.0.0.1:5/d\\n"}}
        >>> event_log({"instance_ref": ref}, "r1")
        ('postgres', 'postgresql://d@127.0.0.1:5/d')
    """
    storage = (args.get("instance_ref") or {}).get("event_storage_data") or {}
    key = {"SqliteEventLogStorage": "base_dir", "PostgresEventLogStorage": "postgres_url"}
    if storage.get("class_name") not in key:
        raise SystemExit(f"standin_step: SQLite or PostgreSQL event logs only, not {storage}")
    field = key[storage["class_name"]]
    found = re.search(rf"^{field}:\s*(.+?)\s*$", storage["config_yaml"], re.MULTILINE)
    if found is None:
        raise SystemExit(f"standin_step: no {field} in {storage['config_yaml']!r}")
    value = found.group(1).strip("'\"")
    if field == "postgres_url":
        return "postgres", value
    return "sqlite", os.path.join(value, f"{run_id}.db")


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


def write(log: tuple[str, str], batch: list[tuple]) -> None:
    """One transaction into the run's event log, waiting out other writers' locks."""
    kind, where = log
    if kind == "postgres":
        write_postgres(where, batch)
        return
    connection = sqlite3.connect(where, timeout=120)
    try:
        with connection:
            connection.executemany(
                "INSERT INTO event_logs (run_id, event, dagster_event_type, timestamp, step_key)"
                " VALUES (?, ?, ?, ?, ?)",
                batch,
            )
    finally:
        connection.close()


def write_postgres(url: str, batch: list[tuple]) -> None:
    """The rows into `event_logs`, each announced on `run_events` as Dagster's storage does."""
    # started with -S (no site): the virtual environment's site-packages, for psycopg2 only
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    venv = os.path.dirname(os.path.dirname(sys.executable))
    sys.path.append(os.path.join(venv, "lib", version, "site-packages"))
    import psycopg2

    connection = psycopg2.connect(url.replace("postgresql+psycopg2://", "postgresql://", 1))
    try:
        with connection, connection.cursor() as cursor:
            for row in batch:
                cursor.execute(
                    "INSERT INTO event_logs (run_id, event, dagster_event_type, timestamp,"
                    " step_key) VALUES (%s, %s, %s, %s, %s) RETURNING id",
                    row,
                )
                (event_id,) = cursor.fetchone()
                cursor.execute("SELECT pg_notify('run_events', %s)", (f"{row[0]}_{event_id}",))
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
    log = event_log(args, run_id)
    write(log, rows(templates[:split], run_id, step_key, os.getpid()))
    time.sleep(float(env.get("BENCH_STEP_SECONDS", "0")))
    write(log, rows(templates[split:], run_id, step_key, os.getpid()))


if __name__ == "__main__":
    main()
