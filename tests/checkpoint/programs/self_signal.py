"""The most natural step loop (save when due, nothing else) signalling itself mid-way.

argv = root, signal name, how many signals, and optionally "run-on" for a store with
`stop_after_preempted_save=False` (the loop then calls `exit_if_preempted()` after its last unit).
Prints "saved <unit>" for the last commit, "finished <unit>" when the loop ran to its end and
"preempted: ..." when the step stopped; exits 3 when preempted.
"""

import os
import signal
import sys
import time

from k8s_ai_orchestrator.checkpoint import CheckpointStore, Preempted

UNITS = 10


def main(root: str, signal_name: str, count: int, run_on: bool) -> int:
    store = CheckpointStore(root=root, interval_s=3600, stop_after_preempted_save=not run_on)
    with store.open("self-signal") as ckpt:
        try:
            for unit in range(1, UNITS):
                if unit == 5:
                    for _ in range(count):
                        os.kill(os.getpid(), signal.Signals[signal_name])
                        time.sleep(0.05)
                if ckpt.due():
                    ckpt.save({"unit": unit}, progress=unit)
            print(f"finished {unit}", flush=True)
            ckpt.exit_if_preempted()
        except Preempted as exc:
            latest = ckpt.latest
            print(f"saved {latest.progress if latest else None}", flush=True)
            print(f"preempted: {exc}", flush=True)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:] == ["run-on"]))
