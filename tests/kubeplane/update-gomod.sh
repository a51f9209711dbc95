#!/usr/bin/env bash
# Regenerate go.mod/go.sum for a Kubernetes release: every staging module that k8s.io/kubernetes
# requires at v0.0.0 is replaced by its published tag (v1.X.Y -> v0.X.Y).
# Usage: tests/kubeplane/update-gomod.sh [1.37.2]
set -euo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN=local
K=${1:-1.37.2}
S=0.${K#1.}
GOMOD=$(go mod download -json "k8s.io/kubernetes@v$K" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
go mod edit -dropreplace=k8s.io/kubernetes 2>/dev/null || true
for m in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$GOMOD"); do
  go mod edit -replace="$m=$m@v$S"
done
go mod edit -require="k8s.io/kubernetes@v$K"
# Gather the one-line replace statements into a single block.
python3 - <<'PY'
import re
text = open("go.mod").read()
lines = re.findall(r"^replace (.+)$", text, flags=re.M)
text = re.sub(r"^replace .+\n\n?", "", text, flags=re.M)
block = "replace (\n" + "".join(f"\t{line}\n" for line in sorted(lines)) + ")\n"
open("go.mod", "w").write(text.rstrip("\n") + "\n\n" + block)
PY
go mod tidy
