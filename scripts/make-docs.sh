#!/usr/bin/env bash
# Regenerates every example output and picture of the documents from the
# commands written in the documents themselves (tests/docs/README.md has the
# conventions): transcript blocks ("$ command" then its output), output
# blocks after Python or shell blocks, and pictures such as
# docs/packctl-plan.svg. Outputs that still match (times and paths
# normalised) are kept as they are, so a run changes only what drifted.
# tests/docs/test_docs.py fails when a committed example differs from what
# this script makes.
#
#   scripts/make-docs.sh [DOCUMENT...]     # default: every document the doc test runs
#
# Environment: PACKD_BUILD_DIR (default build/), PY (default /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-/usr/bin/python3}
BUILD=${PACKD_BUILD_DIR:-$PWD/build}
if [ ! -x "$BUILD/client/c/packctl" ] || [ ! -f "$BUILD/server/libpackd.so" ]; then
  echo "make-docs.sh: no packd build in $BUILD (build first: cmake -S . -B build && cmake --build build -j2)" >&2
  exit 2
fi
exec "$PY" tests/docs/docrun.py --build "$BUILD" --write "$@"
