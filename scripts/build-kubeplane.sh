#!/usr/bin/env bash
# Build the kubeplane multi-call binary (etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet) from tests/kubeplane into a cache directory outside the repository.
#
# The directory is keyed by a hash of go.mod, go.sum, main.go, this script and `go version`, so
# a cached binary is reused at once. Progress goes to stderr; the last stdout line is the
# directory holding `kubeplane` and its five personality symlinks.
# Usage: scripts/build-kubeplane.sh [--check]   (--check: never build, only report the cache)
# Exit codes: 0 built or cached, 3 no Go toolchain (callers decide whether that is fatal),
# 4 --check and not built yet, anything else: the build failed.
# Environment: KUBEPLANE_CACHE_DIR overrides the cache root.
set -euo pipefail

# Everything runs inside main so that bash has parsed the whole file before it starts: editing
# this script during a (long) build must not change what the running build executes.
main() {
  K8S_VERSION=v1.37.2
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  SRC="$ROOT/tests/kubeplane"
  CACHE_ROOT=${KUBEPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-ai-orchestrator}
  PERSONALITIES=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet)

  if ! command -v go >/dev/null 2>&1; then
    echo "build-kubeplane: no 'go' on PATH; install Go >= 1.26 to build the Kubernetes control plane" >&2
    exit 3
  fi
  export GOTOOLCHAIN=local CGO_ENABLED=0

  key=$( { cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" "${BASH_SOURCE[0]}"; go version; } |
    sha256sum | cut -c1-16)
  BIN="$CACHE_ROOT/kubeplane-$key"

  if [ -x "$BIN/kubeplane" ]; then
    echo "kubeplane $K8S_VERSION already built in $BIN"
    echo "$BIN"
    exit 0
  fi
  if [ "${1:-}" = "--check" ]; then
    echo "kubeplane $K8S_VERSION is not built yet; run scripts/build-kubeplane.sh" >&2
    exit 4
  fi

  minor=${K8S_VERSION#v1.}
  minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    ldflags+=" -X $pkg.gitCommit=0000000000000000000000000000000000000000"
  done

  mkdir -p "$CACHE_ROOT"
  tmp=$(mktemp -d "$CACHE_ROOT/.kubeplane-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  start=$(date +%s)
  echo "building kubeplane $K8S_VERSION into $BIN (cold: 25-30 CPU-minutes, about 15 min on 2 idle cores)" >&2
  (cd "$SRC" && go mod download && go build -trimpath -ldflags "$ldflags" -o "$tmp/kubeplane" .)
  for name in "${PERSONALITIES[@]}"; do
    ln -s kubeplane "$tmp/$name"
  done
  # A concurrent build may have finished first; either result is the same binary.
  mv -T "$tmp" "$BIN" 2>/dev/null || echo "another build finished first; using it" >&2
  echo "built kubeplane $K8S_VERSION in $(( $(date +%s) - start )) s"
  echo "$BIN"
}

main "$@"
