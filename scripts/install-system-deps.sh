#!/usr/bin/env bash
# Debian packages the tests need: a real Slurm (daemons started by the test fixture) with its
# accounting (slurmdbd, and mariadb-server for the test-owned server the fixture starts in a
# temporary directory; the package's own service is neither used nor configured), Chromium
# for the browser tests, kubectl (any version that reads server-side table columns: Debian's
# kubernetes-client is v1.20), setpriv (util-linux) and runc (the real node's runtime). Idempotent; skips apt when everything
# is present.
set -euo pipefail
need=()
command -v slurmctld >/dev/null || need+=(slurm-wlm)
command -v slurmrestd >/dev/null || need+=(slurmrestd)
command -v munged >/dev/null || need+=(munge)
[ -x /usr/sbin/slurmdbd ] || command -v slurmdbd >/dev/null || need+=(slurmdbd)
[ -x /usr/sbin/mariadbd ] || command -v mariadbd >/dev/null || need+=(mariadb-server)
[ -e /usr/lib/x86_64-linux-gnu/slurm-wlm/auth_jwt.so ] || ls /usr/lib/*/slurm-wlm/auth_jwt.so >/dev/null 2>&1 || need+=(slurm-wlm-jwt-plugin)
command -v chromium >/dev/null || need+=(chromium)
command -v kubectl >/dev/null || need+=(kubernetes-client)
command -v setpriv >/dev/null || need+=(util-linux)
command -v runc >/dev/null || need+=(runc)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
