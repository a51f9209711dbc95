"""A second process that takes part in a ledger: `python -m tests.local.ledger_holder DIR CPUS`.

It claims CPUS for step 'held' of run 'holder-run', and with `--step` starts a step process
(`sleep`, in its own session) and records it. It prints one JSON line once it holds the claim,
then obeys lines on stdin: `release` (prints `released`) or nothing (it waits to be killed).
"""

import json
import subprocess
import sys
from pathlib import Path

from k8s_ai_orchestrator.backends.local import AdmissionLedger, LocalCapacity
from k8s_ai_orchestrator.backends.local.ledger import Want


def main(directory: str, cpus: float, with_step: bool) -> None:
    ledger = AdmissionLedger(Path(directory))
    want = Want("holder-run", "held", "holder-held-0", cpus=cpus, memory_bytes=1024**3)
    verdict = ledger.admit(want, LocalCapacity(cpus=cpus, memory_bytes=4 * 1024**3))
    step_pid = 0
    if with_step:
        step = subprocess.Popen(["sleep", "600"], start_new_session=True)
        ledger.started(want.job_id, step.pid)
        step_pid = step.pid
    print(json.dumps({"admitted": verdict.admitted, "step_pid": step_pid}), flush=True)
    for line in sys.stdin:
        if line.strip() == "release":
            ledger.release(want.job_id)
            print("released", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), "--step" in sys.argv[3:])
