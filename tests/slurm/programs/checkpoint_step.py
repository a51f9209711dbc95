"""A step that 'checkpoints' on SIGUSR2 and finishes when it starts from a checkpoint.

argv[1]: a directory. First run: wait for SIGUSR2, write `checkpoint`, then keep working until
the job is requeued (or, with argv[2] == "--stop-after-save", exit 143 at once). Second run:
find `checkpoint`, write `resumed`, exit 0.
"""

import os
import signal
import sys
import time
from pathlib import Path

state = Path(sys.argv[1])
if (state / "checkpoint").exists():
    (state / "resumed").write_text(os.environ.get("SLURM_RESTART_COUNT", "0"))
    sys.exit(0)


def save(signum, frame):
    (state / "checkpoint").write_text("saved")
    if sys.argv[2:] == ["--stop-after-save"]:
        sys.exit(143)


signal.signal(signal.SIGUSR2, save)
(state / "started").write_text("1")
for _ in range(600):
    time.sleep(0.1)
sys.exit(1)
