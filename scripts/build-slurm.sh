#!/usr/bin/env bash
# Build a current Slurm (the daemons, slurmrestd with auth/jwt and the OpenAPI data_parser
# plugins, the client commands, auth/munge) from Debian's source into a cache directory outside
# the repository, beside Debian 12's slurm-wlm 22.05 packages that the test cluster uses. It has
# its own prefix, so its binaries, libslurm, PluginDir (<prefix>/lib/slurm, found through the
# rpath that libtool writes) and default slurm.conf (<prefix>/etc) never touch the packages'.
#
# Which source: the newest slurm-wlm that Debian's package mirror serves here. sid's 26.05.5-1 is
# listed in sid's Sources but the mirror answers 404 for its .dsc, .debian.tar.xz and
# .orig.tar.gz; trixie's 24.11.5-4+deb13u1 is listed too and the mirror serves its
# .orig.tar.gz (upstream's release, byte for byte what Debian builds from) but not its .dsc
# or .debian.tar.xz. So this builds trixie's orig tarball, checked against the SHA-256 that
# trixie's signed Sources index gives for it (pinned below), without Debian's patch series.
# The mirror is the one in this machine's own apt configuration; apt's configuration is not
# changed. Build dependencies are bookworm's own -dev packages, installed here when missing
# (only this build needs them, so they are not in scripts/install-system-deps.sh); nothing from
# trixie or sid is installed.
#
# The directory is keyed by a hash of this script and the compiler's version, so a cached build
# is reused at once; it appears whole (a rename) only once the build and install succeeded.
# Progress goes to stderr, each line with its time; the last stdout line is the prefix
# directory (sbin/slurmctld, sbin/slurmd, sbin/slurmrestd, bin/sbatch, lib/slurm/...).
# Usage: scripts/build-slurm.sh [--check]   (--check: never build, only report the cache)
# Exit codes: 0 built or cached, 3 cannot build here (no compiler, not root and build
# dependencies missing, no Debian mirror in apt's configuration), 4 --check and not built yet,
# anything else: the build failed.
# Environment: KUBEPLANE_CACHE_DIR overrides the cache root (shared with build-kubeplane.sh);
# SLURM_BUILD_JOBS sets make's -j (default 2).
set -euo pipefail

# Everything runs inside main so that bash has parsed the whole file before it starts: editing
# this script during a (long) build must not change what the running build executes.
main() {
  # The Debian source this builds, and the SHA-256 of its orig tarball as trixie's signed
  # Sources index lists it (Checksums-Sha256 of slurm-wlm 24.11.5-4+deb13u1).
  SLURM_DEBIAN_VERSION=24.11.5-4+deb13u1
  SLURM_UPSTREAM_VERSION=${SLURM_DEBIAN_VERSION%%-*}
  ORIG=slurm-wlm_${SLURM_UPSTREAM_VERSION}.orig.tar.gz
  ORIG_SHA256=e1a5547edd212c38b5e3230a284133f777b32746551f094aaa81cc4af375e332
  ORIG_SIZE=9907599
  # bookworm's packages that configure needs for what we build (what debian/control asks
  # for, less what only the skipped plugins use: HDF5, IPMI, Kafka, ROCm, GTK). libmariadb-dev
  # (its mariadb_config) gives slurmdbd its accounting_storage/mysql plugin.
  BUILD_DEPS=(libmunge-dev libjwt-dev libjson-c-dev libhttp-parser-dev libyaml-dev
    libpam0g-dev liblua5.1-0-dev libhwloc-dev libdbus-1-dev libcurl4-openssl-dev liblz4-dev
    libnuma-dev libreadline-dev libmariadb-dev pkg-config)

  CACHE_ROOT=${KUBEPLANE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/k8s-ai-orchestrator}
  JOBS=${SLURM_BUILD_JOBS:-2}

  if ! command -v cc >/dev/null 2>&1 || ! command -v make >/dev/null 2>&1; then
    echo "build-slurm: no C compiler or make on PATH" >&2
    exit 3
  fi
  key=$( { cat "${BASH_SOURCE[0]}"; cc --version | head -n1; } | sha256sum | cut -c1-16)
  OUT="$CACHE_ROOT/slurm-$key"

  if [ -f "$OUT/BUILD-INFO" ]; then
    echo "slurm $SLURM_UPSTREAM_VERSION is already built in $OUT" >&2
    echo "$OUT"
    exit 0
  fi
  if [ "${1:-}" = "--check" ]; then
    echo "slurm $SLURM_UPSTREAM_VERSION is not built yet; run scripts/build-slurm.sh" >&2
    exit 4
  fi

  # The lowest CPU priority: this machine runs tests meanwhile.
  renice -n 19 -p $$ >/dev/null 2>&1 || true

  mkdir -p "$CACHE_ROOT"
  # One build at a time: a second run waits here for the first instead of starting another.
  exec 9>"$CACHE_ROOT/.slurm-build.lock"
  flock 9
  if [ -f "$OUT/BUILD-INFO" ]; then
    echo "slurm $SLURM_UPSTREAM_VERSION was built meanwhile in $OUT" >&2
    echo "$OUT"
    exit 0
  fi

  install_build_deps
  mirror=$(debian_mirror)
  if [ -z "$mirror" ]; then
    echo "build-slurm: found no Debian mirror (Types: deb, a bookworm suite) in apt's sources" >&2
    exit 3
  fi

  tmp=$(mktemp -d "$CACHE_ROOT/.slurm-build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  total=$(date +%s)

  start=$(date +%s)
  url="$mirror/pool/main/s/slurm-wlm/$ORIG"
  log "downloading $ORIG (slurm-wlm $SLURM_DEBIAN_VERSION's orig tarball) from the apt mirror"
  # apt's own downloader: apt's proxy settings apply, and it checks the hash it is given.
  /usr/lib/apt/apt-helper download-file "$url" "$tmp/$ORIG" "SHA256:$ORIG_SHA256" \
    2>&1 | grep -v 'unsandboxed' >&2 || true
  if [ "$(stat -c %s "$tmp/$ORIG" 2>/dev/null)" != "$ORIG_SIZE" ] ||
    ! echo "$ORIG_SHA256  $tmp/$ORIG" | sha256sum -c --quiet -; then
    echo "build-slurm: $url: missing, or not the pinned size and SHA-256" >&2
    exit 1
  fi
  mkdir "$tmp/src"
  tar -xzf "$tmp/$ORIG" -C "$tmp/src" --strip-components=1
  log "source: $(( $(date +%s) - start )) s"

  start=$(date +%s)
  cd "$tmp/src"
  log "configuring slurm $SLURM_UPSTREAM_VERSION for prefix $OUT"
  # Only what we use: no sview/X11, HDF5, IPMI, Kafka, GPUs, PMIx, UCX. auth/jwt (libjwt),
  # slurmrestd (http-parser, json-c, yaml), auth/munge and MariaDB (slurmdbd's
  # accounting_storage/mysql, found through /usr/bin/mariadb_config) are required, so they are
  # asked for by path, and the check after install refuses a build that silently left one out.
  # --enable-multiple-slurmd, as Debian's packages: the test cluster runs several slurmd on one
  # host. Without it slurmctld keeps one node per host name, and a node refuses the job
  # credential that another node on the same munged already decoded (munge's replay check), so
  # an srun over two nodes fails with "_verify_signature: failed decode".
  ./configure --prefix="$OUT" --sysconfdir="$OUT/etc" --localstatedir=/var \
    --disable-static --disable-sview --disable-x11 --disable-debug --enable-multiple-slurmd \
    --with-munge=/usr --with-jwt=/usr --with-json=/usr --with-http-parser=/usr \
    --with-yaml=/usr --with-lz4=/usr --with-hwloc=/usr --with-mysql_config=/usr/bin \
    --without-hdf5 --without-rdkafka --without-freeipmi \
    --without-nvml --without-rsmi --without-oneapi --without-pmix --without-ucx \
    --without-ofed --without-s2n --without-hpe-slingshot \
    > "$tmp/configure.log" 2>&1 || { tail -n 40 "$tmp/configure.log" >&2; exit 1; }
  if ! grep -q '^#define HAVE_MYSQL 1' config.h; then
    echo "build-slurm: configure did not find MariaDB (libmariadb-dev's mariadb_config)" >&2
    grep -i mysql "$tmp/configure.log" >&2 || true
    exit 1
  fi
  log "configure: $(( $(date +%s) - start )) s"

  start=$(date +%s)
  log "compiling with make -j$JOBS (cold: about 5 min on 2 cores)"
  make -j"$JOBS" > "$tmp/make.log" 2>&1 || { tail -n 60 "$tmp/make.log" >&2; exit 1; }
  log "make: $(( $(date +%s) - start )) s"

  start=$(date +%s)
  make install-strip DESTDIR="$tmp/root" > "$tmp/install.log" 2>&1 ||
    { tail -n 40 "$tmp/install.log" >&2; exit 1; }
  staged="$tmp/root$OUT"
  mkdir -p "$staged/etc"
  rm -f "$staged"/lib/*.la "$staged"/lib/slurm/*.la
  log "install: $(( $(date +%s) - start )) s"

  # What the tests need must be there: refuse a build that lacks any of it.
  local missing=()
  for f in sbin/slurmctld sbin/slurmd sbin/slurmrestd sbin/slurmdbd bin/sbatch bin/squeue bin/scancel \
    bin/sacct bin/sstat bin/sacctmgr bin/scontrol bin/sinfo bin/srun lib/slurm/auth_munge.so \
    lib/slurm/auth_jwt.so lib/slurm/cgroup_v1.so lib/slurm/cgroup_v2.so \
    lib/slurm/proctrack_cgroup.so lib/slurm/task_cgroup.so lib/slurm/rest_auth_jwt.so \
    lib/slurm/openapi_slurmctld.so lib/slurm/openapi_slurmdbd.so \
    lib/slurm/accounting_storage_slurmdbd.so lib/slurm/accounting_storage_mysql.so; do
    [ -e "$staged/$f" ] || missing+=("$f")
  done
  if ! ls "$staged"/lib/slurm/data_parser_v0_0_*.so >/dev/null 2>&1; then
    missing+=("lib/slurm/data_parser_v0_0_*.so")
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "build-slurm: the build lacks: ${missing[*]}" >&2
    exit 1
  fi
  # The rpath names $OUT, which does not exist yet: point the loader at the staged copy.
  # (`slurmctld -V` needs no slurm.conf; the client commands' --version do.)
  reported=$(LD_LIBRARY_PATH="$staged/lib/slurm:$staged/lib" "$staged/sbin/slurmctld" -V)
  if [ "$reported" != "slurm $SLURM_UPSTREAM_VERSION" ]; then
    echo "build-slurm: the built slurmctld reports '$reported', expected $SLURM_UPSTREAM_VERSION" >&2
    exit 1
  fi
  log "built: $reported"

  {
    echo "slurm-wlm Debian source: $SLURM_DEBIAN_VERSION (orig tarball only; Debian's patches not applied)"
    echo "orig: $ORIG sha256 $ORIG_SHA256"
    echo "reports: $reported"
    echo "compiler: $(cc --version | head -n1)"
    echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) in $(( $(date +%s) - total )) s, make -j$JOBS"
    echo "data parsers: $(cd "$staged/lib/slurm" && echo data_parser_*.so)"
  } > "$staged/BUILD-INFO"
  # The rename makes the build visible only whole. A concurrent build cannot have finished
  # first: the lock above keeps builds apart.
  mv -T "$staged" "$OUT"
  log "built slurm $SLURM_UPSTREAM_VERSION in $(( $(date +%s) - total )) s: $OUT ($(du -sh "$OUT" | cut -f1))"
  echo "$OUT"
}

log() {
  echo "$(date -u +%H:%M:%S) build-slurm: $*" >&2
}

# bookworm's build dependencies; installs the missing ones from the machine's own sources.
install_build_deps() {
  local need=() p
  for p in "${BUILD_DEPS[@]}"; do
    dpkg-query -W -f '${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' ||
      need+=("$p")
  done
  [ ${#need[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "build-slurm: missing build dependencies (install them as root): ${need[*]}" >&2
    exit 3
  fi
  log "installing bookworm build dependencies: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

# The first URI of an apt source of binary packages for a bookworm suite (not -security), read
# from deb822 .sources files and from one-line .list files: the mirror this machine is set to.
debian_mirror() {
  local f uri=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk 'BEGIN { RS = ""; FS = "\n" }
      {
        types = ""; suites = ""; uris = ""
        for (i = 1; i <= NF; i++) {
          if ($i ~ /^#/) continue
          if ($i ~ /^Types:/) types = $i
          if ($i ~ /^Suites:/) suites = $i
          if ($i ~ /^URIs:/) uris = $i
        }
        if (types ~ /[ \t]deb([ \t]|$)/ && suites ~ /[ \t]bookworm([ \t]|$)/) {
          sub(/^URIs:[ \t]*/, "", uris); split(uris, u, /[ \t]+/); print u[1]; exit
        }
      }' "$f")
    [ -n "$uri" ] && break
  done
  if [ -z "$uri" ]; then
    uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i !~ /^\[/ && $i !~ /\]$/) break;
        if ($(i + 1) == "bookworm") { print $i; exit } }')
  fi
  echo "${uri%/}"
}

main "$@"
