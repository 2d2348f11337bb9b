#!/usr/bin/env bash
# Builds the packd container image with podman and checks it end to end:
#   1. a debian:bookworm-slim base image made locally with debootstrap (no
#      registry is reachable here), used with --pull=never;
#   2. podman build of ./Dockerfile (runc, lowered ulimits: see below);
#   3. the container runs as Kubernetes would run it (read-only root, no
#      capabilities, no new privileges) with its ports published on
#      127.0.0.1; packctl health and one plan go through the published port;
#      /metrics, /healthz and /readyz answer; the image's HEALTHCHECK passes;
#   4. podman stop sends SIGTERM: the exit code must be 0 and the log must
#      show the drain;
#   5. the image size is printed.
#
# Usage: scripts/verify-image.sh [--base-only]
#   --base-only    only make the base image (about a minute, once per machine)
# The build context is the committed tree (git archive HEAD), so that work in
# progress in the checkout does not leak into the image; PACKD_CONTEXT=worktree
# builds the working tree as it is instead.
# Environment: PACKD_IMAGE (tag to build, default localhost/packd:verify),
#   GRPC_PORT / METRICS_PORT (host ports, default 15051 / 19464),
#   DRAIN_PATTERN (extended regex the stop log must match, default "drain").
# Needs root (podman, debootstrap); installs podman, runc and debootstrap
# from Debian when they are missing. Takes 3-6 minutes on 2 cores, so it is
# not part of CI; docs/deploy.md records its output.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

IMAGE=${PACKD_IMAGE:-localhost/packd:verify}
BASE=docker.io/library/debian:bookworm-slim
GRPC_PORT=${GRPC_PORT:-15051}
METRICS_PORT=${METRICS_PORT:-19464}
DRAIN_PATTERN=${DRAIN_PATTERN:-drain}
NAME=packd-verify-$$
WORK=$(mktemp -d)
START=$(date +%s)

step() { printf '== [%4ss] %s\n' "$(($(date +%s) - START))" "$*"; }
fail() {
  printf 'verify-image: FAILED: %s\n' "$*" >&2
  exit 1
}

# podman wants systemd timers for health checks and says so on every run and
# stop; this host has no systemd, and the check is run by hand below.
no_systemd_noise() { grep -v 'unable to get systemd connection' >&2 || true; }

cleanup() {
  podman rm -f "$NAME" >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- tools -----------------------------------------------------------------
if [ "$(id -u)" -ne 0 ]; then fail "run as root (podman build/run and debootstrap need it here)"; fi
missing=()
for tool in podman runc debootstrap curl; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  step "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends podman runc debootstrap uidmap \
    fuse-overlayfs slirp4netns curl >/dev/null
fi

# podman's default runtime (crun) cannot start containers on this kind of
# host (hybrid cgroups, high rlimits). runc can, once the two rlimits it sets
# are lowered. CONTAINERS_CONF makes both choices for this script only.
cat >"$WORK/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]

[engine]
runtime = "runc"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"

# --- base image ------------------------------------------------------------
make_base() {
  local rootfs="$WORK/rootfs"
  step "debootstrap --variant=minbase bookworm (base image $BASE)"
  debootstrap --variant=minbase bookworm "$rootfs" http://deb.debian.org/debian >"$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log"; fail "debootstrap"; }
  # Make it look like the official slim image: the same apt sources
  # (updates and security too), no documentation or man pages installed by
  # later apt-get calls, and no package caches.
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  cat >"$rootfs/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
  echo 'APT::Install-Recommends "false";' >"$rootfs/etc/apt/apt.conf.d/docker-no-recommends"
  cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
    "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
    "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/*
  tar -C "$rootfs" -c . | podman import --change 'CMD ["bash"]' - "$BASE" >/dev/null
  rm -rf "$rootfs"
}

if podman image exists "$BASE"; then
  step "base image $BASE is present"
else
  make_base
fi
step "base image size: $(podman image inspect --format '{{.Size}}' "$BASE") bytes"
if [ "${1:-}" = "--base-only" ]; then exit 0; fi

# --- build -----------------------------------------------------------------
step "podman build -t $IMAGE (log in the build output below on failure)"
CONTEXT=$ROOT
if [ "${PACKD_CONTEXT:-head}" != "worktree" ]; then
  CONTEXT=$WORK/context
  mkdir -p "$CONTEXT"
  git archive HEAD | tar -x -C "$CONTEXT"
  echo "context: git archive of $(git rev-parse --short HEAD)"
fi
BUILD_T0=$(date +%s)
if ! podman build --pull=never --network host --format docker --build-arg BUILD_JOBS=2 \
  -t "$IMAGE" -f "$CONTEXT/Dockerfile" "$CONTEXT" >"$WORK/build.log" 2>&1; then
  tail -40 "$WORK/build.log"
  fail "podman build"
fi
BUILD_S=$(($(date +%s) - BUILD_T0))
step "built in ${BUILD_S}s"

SIZE=$(podman image inspect --format '{{.Size}}' "$IMAGE")
BASE_SIZE=$(podman image inspect --format '{{.Size}}' "$BASE")
USER_ID=$(podman image inspect --format '{{.Config.User}}' "$IMAGE")
STOPSIG=$(podman image inspect --format '{{.Config.StopSignal}}' "$IMAGE")
HEALTH=$(podman image inspect --format '{{json .Config.Healthcheck}}' "$IMAGE")
[ "$USER_ID" = "65532:65532" ] || fail "image user is '$USER_ID', expected 65532:65532"
[ "$STOPSIG" = "SIGTERM" ] || [ "$STOPSIG" = "15" ] || fail "stop signal is '$STOPSIG'"
case "$HEALTH" in *packd-healthcheck*) ;; *) fail "no packd-healthcheck HEALTHCHECK in the image: $HEALTH" ;; esac

# --- run -------------------------------------------------------------------
step "podman run (read-only root, cap-drop ALL, ports on 127.0.0.1:$GRPC_PORT/$METRICS_PORT)"
podman run -d --name "$NAME" --read-only --tmpfs /tmp:size=16m --cap-drop ALL \
  --security-opt no-new-privileges -e PACKD_GRACE_PERIOD=5 \
  -p "127.0.0.1:$GRPC_PORT:50051" -p "127.0.0.1:$METRICS_PORT:9464" "$IMAGE" \
  >/dev/null 2> >(no_systemd_noise)

# The image's own packctl, run on the host against the published port (the
# host has the same Debian runtime libraries).
podman cp "$NAME:/usr/local/bin/packctl" "$WORK/packctl"
PACKCTL="$WORK/packctl"
TARGET="127.0.0.1:$GRPC_PORT"

ready=0
for _ in $(seq 1 60); do
  if "$PACKCTL" health --server "$TARGET" >/dev/null 2>&1; then
    ready=1
    break
  fi
  sleep 0.5
done
if [ "$ready" -ne 1 ]; then
  podman logs "$NAME" | tail -20
  fail "packctl health never reported SERVING on $TARGET"
fi
step "packctl health --server $TARGET"
"$PACKCTL" health --server "$TARGET"

LENGTHS=bench/workloads/azure_conv_2023.txt
step "packctl plan --server $TARGET --sample 4096 --dp 8 --max-tokens 32768 $LENGTHS"
"$PACKCTL" plan --server "$TARGET" --sample 4096 --dp 8 --max-tokens 32768 \
  --format summary "$LENGTHS"
"$PACKCTL" plan --server "$TARGET" --sample 4096 --dp 8 --max-tokens 32768 \
  --format json "$LENGTHS" >"$WORK/plan.json"
/usr/bin/python3 - "$WORK/plan.json" <<'EOF'
import json, sys
plan = json.load(open(sys.argv[1]))
ranks = plan.get("ranks", [])
seqs = sorted(s for r in ranks for mb in r.get("miniBatches", [])
              for m in mb.get("microBatches", []) for s in m.get("seqs", []))
assert len(ranks) == 8, f"expected 8 DP ranks, got {len(ranks)}"
assert seqs == list(range(4096)), "every sequence index must appear exactly once"
print(f"plan {plan.get('planId')}: 8 ranks, 4096 sequences, each exactly once")
EOF

step "metrics port: /healthz, /readyz, /metrics"
curl -fsS "http://127.0.0.1:$METRICS_PORT/healthz" >/dev/null || fail "/healthz"
curl -fsS "http://127.0.0.1:$METRICS_PORT/readyz" >/dev/null || fail "/readyz"
curl -fsS "http://127.0.0.1:$METRICS_PORT/metrics" >"$WORK/metrics.txt" || fail "/metrics"
grep -q '^packd_' "$WORK/metrics.txt" || fail "/metrics has no packd_ series"
echo "/metrics: $(grep -c '^packd_' "$WORK/metrics.txt") packd_ samples"

step "podman healthcheck run (the image's HEALTHCHECK)"
podman healthcheck run "$NAME" || fail "HEALTHCHECK did not pass"
echo healthy

# --- stop ------------------------------------------------------------------
step "podman stop -t 30 (SIGTERM, drain)"
STOP_T0=$(date +%s%N)
podman stop -t 30 "$NAME" >/dev/null 2> >(no_systemd_noise)
STOP_MS=$((($(date +%s%N) - STOP_T0) / 1000000))
CODE=$(podman inspect --format '{{.State.ExitCode}}' "$NAME")
podman logs "$NAME" >"$WORK/container.log" 2>&1
echo "--- last lines of the container log"
tail -5 "$WORK/container.log"
echo "---"
[ "$CODE" = "0" ] || fail "exit code after SIGTERM was $CODE, expected 0 (a clean drain)"
grep -Eiq "$DRAIN_PATTERN" "$WORK/container.log" || fail "no line matching /$DRAIN_PATTERN/ in the log"
echo "stopped in ${STOP_MS} ms, exit code 0, drain logged"

step "image size"
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$IMAGE"
echo "image $IMAGE: $SIZE bytes ($((SIZE / 1024 / 1024)) MiB); base $BASE: $BASE_SIZE bytes;" \
  "packd layers add $(((SIZE - BASE_SIZE) / 1024 / 1024)) MiB"
step "verify-image: all checks passed (build ${BUILD_S}s)"
