"""A step loop that signals itself mid-way: argv = root, signal name, how many signals."""

import os
import signal
import sys
import time

from k8s_ai_orchestrator.checkpoint import CheckpointStore, Preempted


def main(root: str, signal_name: str, count: int) -> int:
    store = CheckpointStore(root=root, interval_s=3600)
    with store.open("self-signal") as ckpt:
        for unit in range(1, 1000):
            if unit == 5:
                for _ in range(count):
                    os.kill(os.getpid(), signal.Signals[signal_name])
                    time.sleep(0.05)
            if ckpt.due():
                ckpt.save({"unit": unit}, progress=unit)
                print(f"saved {unit}", flush=True)
                try:
                    ckpt.exit_if_preempted()
                except Preempted as exc:
                    print(f"preempted: {exc}", flush=True)
                    return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
