#!/usr/bin/env bash
# Builds the packd wheel (scripts/build-wheel.sh) and checks that it installs
# and plans where trainers run: a bare Debian 12 container with Python and
# numpy only (no -dev packages, no compiler, no pip, no network).
#
#   1. the base: debootstrap --variant=minbase bookworm with python3 and
#      python3-numpy, imported into podman; kept as a tar outside the
#      repository, named by its package list, so it is made once per machine
#      (${XDG_CACHE_HOME:-$HOME/.cache}/packd/rootfs/);
#   2. a wheelhouse of what pip fetches from an index elsewhere
#      (scripts/wheel-deps.txt, pinned): pip itself, run from its wheel since
#      the base has none, and packd's dependencies grpcio and protobuf, for
#      the container's Python (downloaded once, outside the repository);
#   3. the container (--network none) installs the wheel with
#      `pip install --no-index --find-links` and runs
#      tests/wheel/installed_check.py against the plan the build tree's
#      library makes (same plan id and micro-batches).
#
# Usage: scripts/check-wheel.sh [WHEEL]   (default: build one into dist/)
# Needs root (podman, debootstrap); installs podman, runc and debootstrap
# from Debian when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
T0=$(date +%s)
step() { printf '== [%4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
fail() {
  printf 'check-wheel: FAILED: %s\n' "$*" >&2
  exit 1
}
CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/packd

# What the base holds; the wheelhouse is scripts/wheel-deps.txt for the
# base's Python (Debian 12's 3.11).
BASE_SUITE=bookworm
BASE_PACKAGES=python3,python3-numpy
CONTAINER_PY=3.11

if [ "$(id -u)" -ne 0 ]; then fail "run as root (podman and debootstrap need it here)"; fi
missing=()
for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends podman runc debootstrap uidmap fuse-overlayfs >/dev/null
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# runc with lowered rlimits (scripts/podman-conf.sh).
. scripts/podman-conf.sh
pk_podman_conf "$WORK"

# --- the wheel ---------------------------------------------------------------
if [ $# -ge 1 ]; then
  WHEEL=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
else
  step "scripts/build-wheel.sh"
  bash scripts/build-wheel.sh dist | sed 's/^/  /'
  WHEEL=$(ls "$ROOT"/dist/packd-*.whl)
fi
[ -f "$WHEEL" ] || fail "no wheel at $WHEEL"
mkdir -p "$WORK/dist"
cp "$WHEEL" "$WORK/dist/"

# --- the base ----------------------------------------------------------------
KEY=$(printf '%s\n' "$BASE_SUITE" minbase "$BASE_PACKAGES" | sha256sum | cut -c1-12)
TAR=$CACHE/rootfs/$BASE_SUITE-python-$KEY.tar
IMAGE=localhost/packd-wheel-base:$KEY
if podman image exists "$IMAGE"; then
  step "base image $IMAGE is present"
else
  if [ ! -f "$TAR" ]; then
    step "debootstrap --variant=minbase --include=$BASE_PACKAGES $BASE_SUITE (once; cached as $TAR)"
    mkdir -p "$CACHE/rootfs"
    debootstrap --variant=minbase --include="$BASE_PACKAGES" "$BASE_SUITE" "$WORK/rootfs" \
      http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 ||
      { tail -20 "$WORK/debootstrap.log"; fail "debootstrap"; }
    rm -rf "$WORK"/rootfs/var/cache/apt/archives/*.deb "$WORK"/rootfs/var/lib/apt/lists/*
    tar -C "$WORK/rootfs" -cf "$TAR.partial" . && mv "$TAR.partial" "$TAR"
    rm -rf "$WORK/rootfs"
  fi
  step "podman import $TAR as $IMAGE"
  podman import --change 'CMD ["bash"]' "$TAR" "$IMAGE" >/dev/null
fi

# --- the wheelhouse ----------------------------------------------------------
HOUSE=$CACHE/wheelhouse-cp${CONTAINER_PY/./}-$(grep -v '^#' scripts/wheel-deps.txt | sha256sum | cut -c1-12)
if [ ! -f "$HOUSE/.complete" ]; then
  step "pip download scripts/wheel-deps.txt (Python $CONTAINER_PY, manylinux x86_64) into $HOUSE"
  rm -rf "$HOUSE"
  bash scripts/wheelhouse.sh "$CONTAINER_PY" "$HOUSE" || fail "pip download"
  touch "$HOUSE/.complete"
fi

# --- the reference -----------------------------------------------------------
# The plan the build tree's library makes (the library the wheel was made
# from, before auditwheel moved its dependencies).
REFLIB=${PACKD_WHEEL_BUILD:-$ROOT/build-wheel}/server/libpackd.so
[ -f "$REFLIB" ] || fail "no $REFLIB to make the reference plan with (run scripts/build-wheel.sh)"
step "reference plan from the build tree ($REFLIB)"
PACKD_LIB=$REFLIB PYTHONPATH=$ROOT/client/python \
  /usr/bin/python3 tests/wheel/installed_check.py --reference >"$WORK/reference.json" ||
  fail "the reference plan"

# --- the check ---------------------------------------------------------------
step "podman run --network none $IMAGE: pip install $(basename "$WHEEL"), installed_check.py"
podman run --rm --network none --pull=never \
  -v "$WORK/dist:/dist:ro" -v "$HOUSE:/wheelhouse:ro" \
  -v "$ROOT/tests/wheel/installed_check.py:/check/installed_check.py:ro" \
  -v "$WORK/reference.json:/check/reference.json:ro" \
  "$IMAGE" bash -euo pipefail -c '
    # The base: no compiler, no -dev package, no pip.
    if command -v cc gcc; then echo "the base has a compiler" >&2; exit 1; fi
    if dpkg-query -W -f "\${Package}\n" | grep -- "-dev$"; then echo "the base has -dev packages" >&2; exit 1; fi
    if python3 -c "import pip" 2>/dev/null; then echo "the base has pip" >&2; exit 1; fi
    echo "base: $(dpkg-query -W -f "\${Package}\n" | wc -l) packages, none -dev, no compiler, no pip; $(python3 --version)"
    pip=$(ls /wheelhouse/pip-*.whl)
    python3 "$pip/pip" install -q --disable-pip-version-check --root-user-action=ignore \
      --break-system-packages --no-index --find-links /wheelhouse /dist/packd-*.whl
    python3 "$pip/pip" list --disable-pip-version-check 2>/dev/null | grep -E "^(packd|grpcio|protobuf|numpy) "
    cd /tmp && python3 /check/installed_check.py --expect /check/reference.json
  ' 2> >(grep -v 'unable to get systemd connection' >&2) || fail "the wheel in the bare container"
step "check-wheel: passed"
