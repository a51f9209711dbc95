"""`python -m tests.pipes.terminate_run AI_CONFIG_JSON ENV_JSON`: materialize `tiles`, to be
interrupted (SIGINT, as when the run is terminated) while the program runs."""

from __future__ import annotations

import json
import sys
import tempfile

from k8s_ai_orchestrator import AICompute
from tests.pipes.pipes_support import materialize_tiles

if __name__ == "__main__":
    config, env = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    with tempfile.TemporaryDirectory() as root:
        result = materialize_tiles(AICompute(**config), {"cpu": 0.5, "memory": "256Mi"}, env, root)
    sys.exit(0 if result.success else 1)
