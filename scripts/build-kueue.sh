#!/usr/bin/env bash
# Build Kueue (sigs.k8s.io/kueue/cmd/kueue at the version pinned in tests/kueue/go.mod) into a
# cache directory outside the repository, beside the release's CRDs and webhook manifests, so
# that k8s_ai_orchestrator.testing.controlplane.kueue needs nothing else at run time.
#
# The directory is keyed by a hash of go.mod, go.sum, this script and `go version`, so a cached
# build is reused at once. Progress goes to stderr; the last stdout line is the directory
# holding `kueue`, `crds/*.yaml` and `webhook-manifests.yaml`.
# Usage: scripts/build-kueue.sh [--check]   (--check: never build, only report the cache)
# Exit codes: 0 built or cached, 3 no Go toolchain (callers decide whether that is fatal),
# 4 --check and not built yet, anything else: the build failed.
# Environment: KUBEPLANE_CACHE_DIR overrides the cache root (shared with build-kubeplane.sh).
set -euo pipefail

# Everything runs inside main so that bash has parsed the whole file before it starts: editing
# this script during a (long) build must not change what the running build executes.
main() {
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  SRC="$ROOT/tests/kueue"
  CACHE_ROOT=${KUBEPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-ai-orchestrator}
  MODULE=sigs.k8s.io/kueue

  if ! command -v go >/dev/null 2>&1; then
    echo "build-kueue: no 'go' on PATH; install Go >= 1.26 to build Kueue" >&2
    exit 3
  fi
  export GOTOOLCHAIN=local CGO_ENABLED=0

  key=$( { cat "$SRC/go.mod" "$SRC/go.sum" "${BASH_SOURCE[0]}"; go version; } |
    sha256sum | cut -c1-16)
  BIN="$CACHE_ROOT/kueue-$key"

  if [ -x "$BIN/kueue" ]; then
    echo "kueue already built in $BIN"
    echo "$BIN"
    exit 0
  fi
  if [ "${1:-}" = "--check" ]; then
    echo "kueue is not built yet; run scripts/build-kueue.sh" >&2
    exit 4
  fi

  mkdir -p "$CACHE_ROOT"
  # One build at a time: `make test` starts one in the background, and the test fixture that
  # needs Kueue runs this script again, waiting here for that build instead of starting another.
  exec 9>"$CACHE_ROOT/.kueue-build.lock"
  flock 9
  if [ -x "$BIN/kueue" ]; then
    echo "kueue was built meanwhile in $BIN"
    echo "$BIN"
    exit 0
  fi
  tmp=$(mktemp -d "$CACHE_ROOT/.kueue-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  cd "$SRC"
  go mod download "$MODULE"
  version=$(go list -m -f '{{.Version}}' "$MODULE")
  src=$(go list -m -f '{{.Dir}}' "$MODULE")
  echo "building kueue $version into $BIN (cold: about 10 min on 2 cores)" >&2
  go build -trimpath -ldflags "-s -w -X $MODULE/pkg/version.GitVersion=$version" \
    -o "$tmp/kueue" "$MODULE/cmd/kueue"
  mkdir "$tmp/crds"
  cp "$src"/config/components/crd/bases/*.yaml "$tmp/crds/"
  cp "$src/config/components/webhook/manifests.yaml" "$tmp/webhook-manifests.yaml"
  # A concurrent build may have finished first; either result is the same binary.
  mv -T "$tmp" "$BIN" 2>/dev/null || echo "another build finished first; using it" >&2
  echo "built kueue $version in $(( $(date +%s) - start )) s"
  echo "$BIN"
}

main "$@"
