"""A gang step process: runs `rank_functions.<name>(*argv)` with Gang and prints the result."""

from __future__ import annotations

import sys

import rank_functions

from k8s_ai_orchestrator.errors import GangError
from k8s_ai_orchestrator.gang import Gang

try:
    result = Gang(timeout_s=60).run(getattr(rank_functions, sys.argv[1]), *sys.argv[2:])
except GangError as exc:
    print(f"GANG ERROR: {exc}", flush=True)
    sys.exit(3)
print(f"GANG RESULT: {result}", flush=True)
