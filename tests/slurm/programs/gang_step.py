"""A gang step process: runs `rank_functions.<name>(*argv)` with Gang and prints the result.

Env GANG_TIMEOUT_S bounds the gang (default 60 s); GANG_ERROR_EXIT is the exit code after a
GangError (default 3; 0 behaves like Dagster's step process, which exits 0 after recording
the step's failure).
"""

from __future__ import annotations

import os
import sys

import rank_functions

from k8s_ai_orchestrator.errors import GangError
from k8s_ai_orchestrator.gang import Gang

try:
    gang = Gang(timeout_s=float(os.environ.get("GANG_TIMEOUT_S", "60")))
    result = gang.run(getattr(rank_functions, sys.argv[1]), *sys.argv[2:])
except GangError as exc:
    print(f"GANG ERROR: {exc}", flush=True)
    sys.exit(int(os.environ.get("GANG_ERROR_EXIT", "3")))
print(f"GANG RESULT: {result}", flush=True)
