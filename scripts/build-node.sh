#!/usr/bin/env bash
# Build the real node's programs into a cache directory outside the repository: containerd
# v2.4.2 (containerd, containerd-shim-runc-v2, ctr), the CNI plugins v1.10.0 (bridge,
# host-local, loopback, under cni/) and a static `pause` (Kubernetes' build/pause/linux/pause.c).
# The kubelet is a personality of kubeplane (scripts/build-kubeplane.sh); runc comes from the
# distribution (`apt-get install runc`).
#
# The directory is keyed by a hash of tests/node/go.mod, go.sum, tools.go, the kubeplane go.mod
# (it pins the Kubernetes module that holds pause.c), this script, `go version` and `gcc
# --version`, so a cached build is reused at once. Progress goes to stderr; the last stdout line
# is the directory.
# Usage: scripts/build-node.sh [--check]   (--check: never build, only report the cache)
# Exit codes: 0 built or cached, 3 no Go toolchain or no C compiler (callers decide whether that
# is fatal), 4 --check and not built yet, anything else: the build failed.
# Environment: KUBEPLANE_CACHE_DIR overrides the cache root.
set -euo pipefail

# Everything runs inside main so that bash has parsed the whole file before it starts.
main() {
  CONTAINERD_VERSION=v2.4.2
  CNI_PLUGINS=(ipam/host-local main/bridge main/loopback)
  ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  SRC="$ROOT/tests/node"
  KUBEPLANE_SRC="$ROOT/tests/kubeplane"
  CACHE_ROOT=${KUBEPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-ai-orchestrator}

  for tool in go gcc; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "build-node: no '$tool' on PATH; install Go >= 1.26 and gcc (with static libc) to build the real node" >&2
      exit 3
    fi
  done
  export GOTOOLCHAIN=local CGO_ENABLED=0

  key=$( { cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/tools.go" "$KUBEPLANE_SRC/go.mod" \
    "${BASH_SOURCE[0]}"; go version; gcc --version | head -1; } | sha256sum | cut -c1-16)
  OUT="$CACHE_ROOT/node-$key"

  if [ -x "$OUT/containerd" ]; then
    echo "node programs already built in $OUT"
    echo "$OUT"
    exit 0
  fi
  if [ "${1:-}" = "--check" ]; then
    echo "the node programs are not built yet; run scripts/build-node.sh" >&2
    exit 4
  fi

  mkdir -p "$CACHE_ROOT"
  # One build at a time: `make test` starts one in the background, and the test fixture that
  # needs the node runs this script again, waiting here for that build instead of starting another.
  exec 9>"$CACHE_ROOT/.node-build.lock"
  flock 9
  if [ -x "$OUT/containerd" ]; then
    echo "node programs were built meanwhile in $OUT"
    echo "$OUT"
    exit 0
  fi
  tmp=$(mktemp -d "$CACHE_ROOT/.node-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  echo "building the node programs into $OUT (cold: about 10 min on 2 idle cores)" >&2
  cd "$SRC"
  go mod download

  start=$(date +%s)
  k8s_dir=$(cd "$KUBEPLANE_SRC" && go mod download -json k8s.io/kubernetes |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  gcc -Os -Wall -Werror -static -DVERSION=k8s-ai-orchestrator -o "$tmp/pause" \
    "$k8s_dir/build/pause/linux/pause.c"
  echo "pause: $(( $(date +%s) - start )) s" >&2

  start=$(date +%s)
  mkdir "$tmp/cni"
  for plugin in "${CNI_PLUGINS[@]}"; do
    go build -trimpath -ldflags "-s -w" -o "$tmp/cni/${plugin#*/}" \
      "github.com/containernetworking/plugins/plugins/$plugin"
  done
  echo "CNI plugins: $(( $(date +%s) - start )) s" >&2

  start=$(date +%s)
  pkg=github.com/containerd/containerd/v2
  ldflags="-s -w -X $pkg/version.Version=$CONTAINERD_VERSION -X $pkg/version.Revision=module"
  for cmd in containerd containerd-shim-runc-v2 ctr; do
    go build -trimpath -tags no_btrfs -ldflags "$ldflags" -o "$tmp/$cmd" "$pkg/cmd/$cmd"
    echo "$cmd: $(( $(date +%s) - start )) s since containerd's first build started" >&2
  done

  # A concurrent build may have finished first; either result is the same set of programs.
  mv -T "$tmp" "$OUT" 2>/dev/null || echo "another build finished first; using it" >&2
  echo "$OUT"
}

main "$@"
