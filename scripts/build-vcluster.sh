#!/usr/bin/env bash
# Build the real vCluster syncer (`vcluster`, the module's cmd/vcluster: `vcluster start`) from
# the github.com/loft-sh/vcluster version pinned in tests/vcluster/go.mod into a cache directory
# outside the repository, beside the module's chart/values.yaml (the syncer parses its config
# strictly, with no chart defaults merged, so a config is those values plus overrides).
#
# The directory is keyed by a hash of tests/vcluster/go.mod, go.sum, main.go, this script and
# `go version`, so a cached build is reused at once. Progress and per-phase timings go to
# stderr; the last stdout line is the directory holding `vcluster` and `values.yaml`.
# Usage: scripts/build-vcluster.sh [--check]   (--check: never build, only report the cache)
# Exit codes: 0 built or cached, 3 no Go toolchain (callers decide whether that is fatal),
# 4 --check and not built yet, anything else: the build failed.
# Environment: KUBEPLANE_CACHE_DIR overrides the cache root (shared with build-kubeplane.sh).
set -euo pipefail

# Everything runs inside main so that bash has parsed the whole file before it starts: editing
# this script during a (long) build must not change what the running build executes.
main() {
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  SRC="$ROOT/tests/vcluster"
  CACHE_ROOT=${KUBEPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-ai-orchestrator}
  MODULE=github.com/loft-sh/vcluster

  if ! command -v go >/dev/null 2>&1; then
    echo "build-vcluster: no 'go' on PATH; install Go >= 1.26 to build the vCluster syncer" >&2
    exit 3
  fi
  export GOTOOLCHAIN=local CGO_ENABLED=0

  key=$( { cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" "${BASH_SOURCE[0]}"; go version; } |
    sha256sum | cut -c1-16)
  OUT="$CACHE_ROOT/vcluster-$key"

  if [ -x "$OUT/vcluster" ]; then
    echo "the vCluster syncer is already built in $OUT" >&2
    echo "$OUT"
    exit 0
  fi
  if [ "${1:-}" = "--check" ]; then
    echo "the vCluster syncer is not built yet; run scripts/build-vcluster.sh" >&2
    exit 4
  fi

  mkdir -p "$CACHE_ROOT"
  # One build at a time: `make test` starts one in the background, and the test fixture that
  # needs the syncer runs this script again, waiting here for that build instead of starting
  # another.
  exec 9>"$CACHE_ROOT/.vcluster-build.lock"
  flock 9
  if [ -x "$OUT/vcluster" ]; then
    echo "the vCluster syncer was built meanwhile in $OUT" >&2
    echo "$OUT"
    exit 0
  fi
  tmp=$(mktemp -d "$CACHE_ROOT/.vcluster-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  cd "$SRC"

  start=$(date +%s)
  go mod download
  version=$(go list -m -f '{{.Version}}' "$MODULE")
  src=$(go list -m -f '{{.Dir}}' "$MODULE")
  echo "modules: $(( $(date +%s) - start )) s" >&2

  echo "building the vCluster syncer $version into $OUT (cold: about 5 min on 2 cores)" >&2
  start=$(date +%s)
  go build -trimpath -ldflags "-s -w -X $MODULE/pkg/telemetry.SyncerVersion=$version" \
    -o "$tmp/vcluster" .
  echo "vcluster: $(( $(date +%s) - start )) s" >&2

  cp "$src/chart/values.yaml" "$tmp/values.yaml"
  reported=$("$tmp/vcluster" version)
  if [ "$reported" != "$version" ]; then
    echo "build-vcluster: the built syncer reports version '$reported', expected $version" >&2
    exit 1
  fi
  # A concurrent build may have finished first; either result is the same binary.
  mv -T "$tmp" "$OUT" 2>/dev/null || echo "another build finished first; using it" >&2
  echo "$OUT"
}

main "$@"
