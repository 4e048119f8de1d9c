#!/usr/bin/env bash
# Kept so that `bash testenv/build.sh` still works: the builder now ships with
# kubemoon_testing as the `kubemoon-testenv` command (its Go module is package data in
# kubemoon_testing/testenv/). This forwards to it, with the old flags:
#
#   testenv/build.sh              kubemoon-testenv build
#   testenv/build.sh --force      kubemoon-testenv build --force
#   testenv/build.sh --print-dir  kubemoon-testenv path
set -euo pipefail

ROOT=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -x $ROOT/.venv/bin/kubemoon-testenv ]]; then
    cmd=("$ROOT/.venv/bin/kubemoon-testenv")
elif command -v kubemoon-testenv >/dev/null 2>&1; then
    cmd=(kubemoon-testenv)
else
    echo "testenv/build.sh: kubemoon-testenv not found; run \`make install\` first" >&2
    exit 1
fi

case "${1:-}" in
    --print-dir) exec "${cmd[@]}" path ;;
    --force) exec "${cmd[@]}" build --force ;;
    "") exec "${cmd[@]}" build ;;
    *) exec "${cmd[@]}" "$@" ;;
esac
