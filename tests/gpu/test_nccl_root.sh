#!/usr/bin/env bash
# Regression test: with PK_GPU_NCCL_ROOT set, gpu/CMakeLists.txt takes NCCL's
# header and library from that folder only. The GPU machine's first run
# linked a system libnccl.so (found first by the name "nccl") against the
# nvidia-nccl wheel's header, whose folder holds only libnccl.so.2.
#
# Here: a root with include/nccl.h and lib/libnccl.so.2 alone, and a decoy
# libnccl.so on CMAKE_LIBRARY_PATH; the configure must report the root's
# library. Exits 77 (skipped) without NCCL or a CUDA compiler.
#
#   test_nccl_root.sh CMAKE GPU_SOURCE_DIR NCCL_INCLUDE_DIR NCCL_LIBRARY
set -euo pipefail
cmake_bin=$1 src=$2 inc=$3 lib=$4
if [ ! -f "$inc/nccl.h" ] || [ ! -e "$lib" ]; then
  echo "SKIP: no NCCL header or library ($inc, $lib)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/root/include" "$tmp/root/lib" "$tmp/decoy"
cp "$inc/nccl.h" "$tmp/root/include/"
ln -s "$(readlink -f "$lib")" "$tmp/root/lib/libnccl.so.2"
ln -s "$(readlink -f "$lib")" "$tmp/decoy/libnccl.so"
out=$("$cmake_bin" -S "$src" -B "$tmp/build" -DPK_GPU_BUILD_TESTS=OFF \
  -DPK_GPU_NCCL_ROOT="$tmp/root" -DCMAKE_LIBRARY_PATH="$tmp/decoy" 2>&1) || {
  echo "$out"
  echo "FAIL: configure failed"
  exit 1
}
line=$(printf '%s\n' "$out" | grep 'packd gpu:' || true)
echo "$line"
case "$line" in
*"CUDA backend OFF"*)
  echo "SKIP: no CUDA compiler, NCCL is not looked up"
  exit 77
  ;;
*"($tmp/root/lib/libnccl.so.2)"*) echo "PASSED" ;;
*)
  echo "FAIL: expected the library of PK_GPU_NCCL_ROOT ($tmp/root/lib/libnccl.so.2)"
  exit 1
  ;;
esac
