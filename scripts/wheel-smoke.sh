#!/usr/bin/env bash
# Build the wheel, install it alone into a fresh virtualenv and run tests/packaging/smoke.py
# there, from a directory outside the repository: a packaging mistake fails `make test`.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
python="${1:-$repo/.venv/bin/python}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$python" -m pip wheel -q --no-deps -w "$work/dist" "$repo"
"$python" -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$work"/dist/k8s_ai_orchestrator-*.whl
mkdir "$work/run"
cp "$repo/tests/packaging/smoke.py" "$repo/tests/packaging/smoke_defs.py" "$work/run/"
cd "$work/run"
PYTHONPATH= "$work/venv/bin/python" smoke.py
