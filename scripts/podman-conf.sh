# Sourced by scripts/check-wheel.sh and scripts/verify-image.sh:
# pk_podman_conf DIR writes a containers.conf into DIR and exports
# CONTAINERS_CONF for the calling script only. podman's default runtime
# (crun) cannot start containers on this kind of host (hybrid cgroups, high
# rlimits); runc can, once the two rlimits it sets are lowered.
pk_podman_conf() {
  cat >"$1/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=1000:1000"]

[engine]
runtime = "runc"
EOF
  export CONTAINERS_CONF="$1/containers.conf"
}
