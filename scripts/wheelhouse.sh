#!/usr/bin/env bash
# Downloads the pinned wheels of scripts/wheel-deps.txt for one CPython
# version on Linux x86_64 (manylinux) into a folder, for pip on a machine
# without an index (pip install --no-index --find-links FOLDER).
#
# Usage: scripts/wheelhouse.sh PY_VERSION FOLDER   (e.g. 3.12 /tmp/house)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:?usage: wheelhouse.sh PY_VERSION FOLDER}
dir=${2:?usage: wheelhouse.sh PY_VERSION FOLDER}
mkdir -p "$dir"
/usr/bin/python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "$py" --implementation cp --abi "cp${py/./}" --abi abi3 --abi none \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  --platform any -d "$dir" -r scripts/wheel-deps.txt
