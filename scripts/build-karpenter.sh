#!/usr/bin/env bash
# Build Karpenter with its kwok cloud provider (sigs.k8s.io/karpenter/kwok at the version pinned
# in tests/karpenter/go.mod) into a cache directory outside the repository, beside the release's
# CRDs, so that k8s_ai_orchestrator.testing.controlplane.karpenter needs nothing else at run time.
#
# Version: v1.14.1, the newest release whose go.mod (go 1.26.6) the machine's go1.26.8 builds with
# GOTOOLCHAIN=local; v1.14.3 asks for go 1.26.10, v1.15.0 for go 1.26.9.
# Cold build (modules downloaded, empty Go build cache, 2 shared cores, nice 19): 4 min 31 s
# (3 min 54 s user); the binary is 58 MiB.
#
# The directory is keyed by a hash of go.mod, go.sum, this script and `go version`, so a cached
# build is reused at once. Progress goes to stderr; the last stdout line is the directory
# holding `karpenter` and `crds/*.yaml`.
# Usage: scripts/build-karpenter.sh [--check]   (--check: never build, only report the cache)
# Exit codes: 0 built or cached, 3 no Go toolchain (callers decide whether that is fatal),
# 4 --check and not built yet, anything else: the build failed.
# Environment: KUBEPLANE_CACHE_DIR overrides the cache root (shared with build-kubeplane.sh).
set -euo pipefail

# Everything runs inside main so that bash has parsed the whole file before it starts: editing
# this script during a (long) build must not change what the running build executes.
main() {
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  SRC="$ROOT/tests/karpenter"
  CACHE_ROOT=${KUBEPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-ai-orchestrator}
  MODULE=sigs.k8s.io/karpenter

  if ! command -v go >/dev/null 2>&1; then
    echo "build-karpenter: no 'go' on PATH; install Go >= 1.26.6 to build Karpenter" >&2
    exit 3
  fi
  export GOTOOLCHAIN=local CGO_ENABLED=0

  key=$( { cat "$SRC/go.mod" "$SRC/go.sum" "${BASH_SOURCE[0]}"; go version; } |
    sha256sum | cut -c1-16)
  BIN="$CACHE_ROOT/karpenter-$key"

  if [ -x "$BIN/karpenter" ]; then
    echo "karpenter already built in $BIN"
    echo "$BIN"
    exit 0
  fi
  if [ "${1:-}" = "--check" ]; then
    echo "karpenter is not built yet; run scripts/build-karpenter.sh" >&2
    exit 4
  fi

  mkdir -p "$CACHE_ROOT"
  # One build at a time: `make test` starts one in the background, and the test fixture that
  # needs Karpenter runs this script again, waiting here for that build instead of starting another.
  exec 9>"$CACHE_ROOT/.karpenter-build.lock"
  flock 9
  if [ -x "$BIN/karpenter" ]; then
    echo "karpenter was built meanwhile in $BIN"
    echo "$BIN"
    exit 0
  fi
  tmp=$(mktemp -d "$CACHE_ROOT/.karpenter-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  cd "$SRC"
  go mod download "$MODULE"
  version=$(go list -m -f '{{.Version}}' "$MODULE")
  src=$(go list -m -f '{{.Dir}}' "$MODULE")
  echo "building karpenter $version (kwok provider) into $BIN" >&2
  go build -trimpath -ldflags "-s -w" -o "$tmp/karpenter" "$MODULE/kwok"
  mkdir "$tmp/crds"
  cp "$src"/pkg/apis/crds/*.yaml "$src"/kwok/apis/crds/*.yaml "$tmp/crds/"
  chmod -R u+w "$tmp/crds"
  # A concurrent build may have finished first; either result is the same binary.
  mv -T "$tmp" "$BIN" 2>/dev/null || echo "another build finished first; using it" >&2
  echo "built karpenter $version in $(( $(date +%s) - start )) s"
  echo "$BIN"
}

main "$@"
