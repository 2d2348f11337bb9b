#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang-14 in build-fuzz/ and
# runs each for a bounded time, one process on one core:
#   scripts/fuzz.sh [SECONDS_PER_TARGET]     (default 60)
# PK_FUZZ_TARGETS="fuzz_http fuzz_plan_bytes" limits the targets. Each target
# starts from its committed seeds (tests/fuzz/corpus/<target>/, never
# modified) plus what earlier runs found (build-fuzz/corpus/<target>/).
# Exits non-zero on the first target that crashes, leaks, times out or runs
# out of memory; the input is kept in build-fuzz/artifacts/<target>/ and
# reproduces with: build-fuzz/fuzz/<target> build-fuzz/artifacts/<target>/crash-*
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-60}
JOBS=${JOBS:-$(nproc)}
B=build-fuzz
TARGETS=${PK_FUZZ_TARGETS:-fuzz_plan_bytes fuzz_packctl_input fuzz_http fuzz_gpu_layout}

# PK_SELF_CHECK (implied by PK_FUZZ, named here to be plain): the planner
# checks every stage's contract, and fuzz_plan_bytes aborts on a break.
cmake -S . -B $B -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPK_FUZZ=ON \
  -DPK_SELF_CHECK=ON -DPK_WERROR=ON -DPK_BUILD_BENCH=OFF -DPK_BUILD_TESTS=OFF -DPK_GPU_CUDA=OFF >/dev/null
# shellcheck disable=SC2086
cmake --build $B -j "$JOBS" --target $TARGETS

ROOT=$PWD
for t in $TARGETS; do
  log="$B/$t.log"
  arts="$B/artifacts/$t"
  mkdir -p "$B/corpus/$t" "$arts" "$B/run/$t"
  echo "== $t: ${SECONDS_PER_TARGET}s"
  # One job, one worker: libFuzzer runs the target in a child process whose
  # log (fuzz-0.log) lands in the current folder, hence the cd into
  # $B/run/<target>; the parent prints the log when the job ends.
  # -max_len: room for 4096 packed lengths in a request, the harness's limit.
  rc=0
  (cd "$B/run/$t" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$ROOT/$B/fuzz/$t" -max_total_time="$SECONDS_PER_TARGET" -jobs=1 -workers=1 -timeout=10 \
    -rss_limit_mb=2048 -max_len=20000 -print_final_stats=1 \
    -artifact_prefix="$ROOT/$arts/" "$ROOT/$B/corpus/$t" "$ROOT/tests/fuzz/corpus/$t" \
    >"$ROOT/$log" 2>&1) || rc=$?
  # A job's crash does not always make the parent fail: the artifacts folder
  # (crash-, leak-, timeout-, oom- files) and the log are checked too. An
  # input left there from an earlier run fails again until it is removed.
  if [ "$rc" -ne 0 ] || [ -n "$(find "$arts" -type f -print -quit)" ] ||
    grep -qE 'ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error:' "$log"; then
    tail -60 "$log"
    echo "fuzz: $t FAILED (input in $arts/)"
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb' "$log" || true
done
echo "== fuzz: every target ran ${SECONDS_PER_TARGET}s without a crash"
