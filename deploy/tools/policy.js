// The rules every rendering of packd's deployment must keep (used by
// validate.js --policy). They are the facts the files promise in their
// comments and in docs/deploy.md, so that a change of one value that breaks
// another (a new listen port without new probes, a longer drain than the
// termination grace period, a selector that matches no pod) fails here.
//
// With a plan store (PACKD_PLAN_STORE) it also checks that packd can reach
// the store (egress), that the password is a file from a Secret and not in
// the URL, that the replicas share a plan id secret, and that a bundled Redis
// keeps the same security rules and admits only its clients.
//
// With transport security (PACKD_TLS_CERT, PACKD_AUTH_TOKEN_FILE) it checks
// that every key, certificate and token file comes from a Secret volume and
// that the probes do not use the kubelet's gRPC probe, which cannot speak
// TLS.
//
// checkPolicy(docs) returns a Map from each object that breaks a rule to the
// list of its problems; objects that keep every rule are not in it.
"use strict";

const WORKLOAD_KINDS = new Set(["Deployment", "StatefulSet", "DaemonSet", "Job", "Pod"]);
const LOOPBACK = /^(127\.[0-9.]+|localhost|\[::1\])$/;

// A packd container is one whose image is named packd (any registry or tag).
function isPackd(container) {
  return typeof container.image === "string" && /(^|\/)packd(:|@|$)/.test(container.image);
}

// A Redis container (the bundled plan store).
function isRedis(container) {
  return typeof container.image === "string" && /(^|\/)redis(:|@|$)/.test(container.image);
}

function podOf(doc) {
  if (doc.kind === "Pod") return { meta: doc.metadata || {}, spec: doc.spec || {} };
  const t = (doc.spec && doc.spec.template) || {};
  return { meta: t.metadata || {}, spec: t.spec || {} };
}

// The environment a container sees: its envFrom ConfigMaps, then env.
function envOf(container, configMaps, problems) {
  const env = {};
  for (const src of container.envFrom || []) {
    if (!src.configMapRef) continue;
    const cm = configMaps.get(src.configMapRef.name);
    if (!cm) problems.push(`envFrom names ConfigMap "${src.configMapRef.name}", which is not rendered`);
    else Object.assign(env, cm.data || {});
  }
  for (const e of container.env || []) {
    if (typeof e.value === "string") env[e.name] = e.value;
    else if (e.valueFrom && e.valueFrom.secretKeyRef)
      env[e.name] = `<secret ${e.valueFrom.secretKeyRef.name}/${e.valueFrom.secretKeyRef.key}>`;
  }
  return env;
}

function splitHostPort(text) {
  const at = String(text).lastIndexOf(":");
  return at < 0 ? null : { host: text.slice(0, at), port: Number(text.slice(at + 1)) };
}

// Seconds a preStop hook holds the container before SIGTERM (0 if none).
function preStopSeconds(container) {
  const pre = container.lifecycle && container.lifecycle.preStop;
  if (!pre) return 0;
  if (pre.sleep && Number.isInteger(pre.sleep.seconds)) return pre.sleep.seconds;
  const cmd = (pre.exec && pre.exec.command) || [];
  const i = cmd.findIndex((c) => /(^|\/)sleep$/.test(c));
  return i >= 0 && cmd[i + 1] !== undefined ? Number(cmd[i + 1]) : 0;
}

function checkSecurity(c, pod, problems) {
  const sc = c.securityContext || {};
  const psc = pod.spec.securityContext || {};
  if (sc.allowPrivilegeEscalation !== false) problems.push(`${c.name}: allowPrivilegeEscalation must be false`);
  if (sc.readOnlyRootFilesystem !== true) problems.push(`${c.name}: readOnlyRootFilesystem must be true`);
  if (sc.privileged === true) problems.push(`${c.name}: privileged must not be set`);
  const drop = (sc.capabilities && sc.capabilities.drop) || [];
  if (!drop.includes("ALL")) problems.push(`${c.name}: capabilities.drop must include ALL`);
  if (!(sc.runAsNonRoot === true || (sc.runAsNonRoot === undefined && psc.runAsNonRoot === true)))
    problems.push(`${c.name}: runAsNonRoot must be true (container or pod)`);
  const uid = sc.runAsUser !== undefined ? sc.runAsUser : psc.runAsUser;
  if (uid === 0) problems.push(`${c.name}: runAsUser must not be 0`);
  const seccomp = (sc.seccompProfile || psc.seccompProfile || {}).type;
  if (seccomp !== "RuntimeDefault" && seccomp !== "Localhost")
    problems.push(`${c.name}: seccompProfile must be RuntimeDefault or Localhost (container or pod)`);
}

function checkResources(c, problems) {
  const r = c.resources || {};
  for (const kind of ["requests", "limits"])
    for (const res of ["cpu", "memory"])
      if (!r[kind] || r[kind][res] === undefined) problems.push(`${c.name}: resources.${kind}.${res} is missing`);
}

function checkProbes(c, env, problems) {
  const listen = splitHostPort(env.PACKD_LISTEN || "");
  if (!listen) {
    problems.push(`${c.name}: PACKD_LISTEN is not set to HOST:PORT`);
    return;
  }
  const local = LOOPBACK.test(listen.host);
  const tls = Boolean(env.PACKD_TLS_CERT);
  const metrics = splitHostPort(env.PACKD_METRICS_LISTEN || "");
  for (const name of ["startupProbe", "readinessProbe", "livenessProbe"]) {
    const p = c[name];
    if (!p) {
      problems.push(`${c.name}: ${name} is missing`);
    } else if (tls && !local) {
      // The kubelet's gRPC probe has no TLS: ask the plaintext metrics
      // listener, whose /readyz follows Health/Check and /healthz liveness.
      const want = name === "livenessProbe" ? "/healthz" : "/readyz";
      if (p.grpc) problems.push(`${c.name}: ${name} is a grpc probe, which cannot speak TLS (PACKD_TLS_CERT is set)`);
      else if (!p.httpGet || p.httpGet.path !== want || !metrics || p.httpGet.port !== metrics.port)
        problems.push(`${c.name}: ${name} must be httpGet ${want} on the metrics port ${metrics ? metrics.port : "?"}`);
    } else if (!local) {
      // The kubelet probes the pod IP: use its native gRPC health probe.
      if (!p.grpc) problems.push(`${c.name}: ${name} must be a grpc probe`);
      else if (p.grpc.port !== listen.port)
        problems.push(`${c.name}: ${name} probes port ${p.grpc.port}, packd listens on ${listen.port}`);
    } else {
      // Bound to loopback, only a command inside the container reaches it.
      const cmd = (p.exec && p.exec.command) || [];
      if (!cmd.includes("health") || !cmd.some((a) => a.endsWith(`:${listen.port}`)))
        problems.push(`${c.name}: ${name} must exec "packctl health --server 127.0.0.1:${listen.port}"`);
    }
  }
  const grpcPort = (c.ports || []).find((p) => p.name === "grpc");
  if (grpcPort && grpcPort.containerPort !== listen.port)
    problems.push(`${c.name}: port "grpc" is ${grpcPort.containerPort}, packd listens on ${listen.port}`);
}

// After SIGTERM packd reports NOT_SERVING for PACKD_DRAIN_DELAY seconds
// (default 1), then closes its listener and gives calls in flight
// PACKD_GRACE_PERIOD seconds; then planning still running stops at its next
// poll and the last answers get up to 1 s to leave. EXIT_MARGIN covers those
// two, so drain + grace + EXIT_MARGIN is the longest time it takes to exit.
const EXIT_MARGIN = 2;
function checkDrain(c, env, pod, problems) {
  const period = Number(env.PACKD_GRACE_PERIOD);
  const delay = env.PACKD_DRAIN_DELAY === undefined ? 1 : Number(env.PACKD_DRAIN_DELAY);
  if (!Number.isFinite(period) || period <= 0 || !Number.isFinite(delay) || delay < 0) {
    problems.push(`${c.name}: PACKD_GRACE_PERIOD and PACKD_DRAIN_DELAY must be numbers of seconds`);
    return;
  }
  const grace = delay + period;
  const term = pod.spec.terminationGracePeriodSeconds !== undefined ? pod.spec.terminationGracePeriodSeconds : 30;
  const pre = preStopSeconds(c);
  if (!(term >= pre + grace + EXIT_MARGIN))
    problems.push(
      `${c.name}: terminationGracePeriodSeconds ${term} must be at least preStop ${pre} s + drain ${grace} s + ${EXIT_MARGIN} s to stop planning and send the last answers`
    );
  const live = c.livenessProbe;
  if (live) {
    const tolerance = (live.periodSeconds || 10) * (live.failureThreshold || 3);
    if (tolerance <= grace)
      problems.push(`${c.name}: liveness gives up after ${tolerance} s, before the ${grace} s drain ends`);
  }
}

// The NetworkPolicies of docs that select the pod's labels.
function policiesFor(pod, policies) {
  return policies.filter((np) => selects((np.spec || {}).podSelector, pod.meta.labels));
}

// A file named by a variable must come from a Secret volume of the pod.
function checkSecretFile(c, env, pod, name, problems) {
  const path = env[name];
  if (!path) return;
  const m = (c.volumeMounts || []).find((vm) => path.startsWith(String(vm.mountPath).replace(/\/?$/, "/")));
  const vol = m && (pod.spec.volumes || []).find((v) => v.name === m.name);
  if (!m) problems.push(`${c.name}: ${name} ${path} is not on a mounted volume`);
  else if (!vol || !vol.secret) problems.push(`${c.name}: ${name} ${path} must come from a Secret volume`);
}

// TLS and tokens: every file from a Secret, a key only with its certificate.
function checkTransportSecurity(c, env, pod, problems) {
  for (const name of ["PACKD_TLS_CERT", "PACKD_TLS_KEY", "PACKD_TLS_CLIENT_CA", "PACKD_AUTH_TOKEN_FILE",
    "PACKD_PLAN_ID_SECRET_FILE"])
    checkSecretFile(c, env, pod, name, problems);
  if (Boolean(env.PACKD_TLS_CERT) !== Boolean(env.PACKD_TLS_KEY))
    problems.push(`${c.name}: PACKD_TLS_CERT and PACKD_TLS_KEY must be set together`);
  if (env.PACKD_TLS_CLIENT_CA && !env.PACKD_TLS_CERT)
    problems.push(`${c.name}: PACKD_TLS_CLIENT_CA is set without PACKD_TLS_CERT`);
}

// --plan-store: a redis:// URL (from a Secret or a literal without a
// password), a password file on a Secret volume, and egress to the store.
function checkPlanStore(c, env, pod, policies, problems) {
  const store = env.PACKD_PLAN_STORE;
  if (store === undefined || store === "") {
    if (env.PACKD_PLAN_STORE_PASSWORD_FILE)
      problems.push(`${c.name}: PACKD_PLAN_STORE_PASSWORD_FILE is set without PACKD_PLAN_STORE`);
    return;
  }
  let port = 6379;
  if (!store.startsWith("<secret ")) {
    if (/^rediss:\/\//.test(store))
      problems.push(`${c.name}: PACKD_PLAN_STORE is rediss:// (TLS), which packd refuses (no TLS in Debian 12's hiredis)`);
    else if (!/^redis:\/\//.test(store)) problems.push(`${c.name}: PACKD_PLAN_STORE "${store}" is not a redis:// URL`);
    if (/^rediss?:\/\/[^/]*@/.test(store))
      problems.push(`${c.name}: PACKD_PLAN_STORE has a password in it; put it in a Secret file (PACKD_PLAN_STORE_PASSWORD_FILE)`);
    const m = /^rediss?:\/\/(?:[^/]*@)?(?:\[[^\]]*\]|[^:/]*)(?::(\d+))?/.exec(store);
    if (m && m[1]) port = Number(m[1]);
  }
  checkSecretFile(c, env, pod, "PACKD_PLAN_STORE_PASSWORD_FILE", problems);
  // Plan ids are keyed: replicas with keys of their own name one plan
  // differently, and GetRankPlan on another replica misses it in the store.
  if (!env.PACKD_PLAN_ID_SECRET_FILE)
    problems.push(`${c.name}: PACKD_PLAN_STORE is set without PACKD_PLAN_ID_SECRET_FILE (replicas must share the plan id secret)`);
  for (const np of policiesFor(pod, policies)) {
    if (!(np.spec.policyTypes || []).includes("Egress")) continue;
    const open = (np.spec.egress || []).some(
      (r) => !r.ports || r.ports.length === 0 || r.ports.some((p) => p.port === port || p.port === "redis"));
    if (!open)
      problems.push(`${c.name}: NetworkPolicy ${np.metadata.name} allows no egress to the plan store's port ${port}`);
  }
}

// The bundled Redis: the same security context and resources as packd,
// probes, a fixed tag, and a NetworkPolicy that admits only named clients.
function checkRedis(c, pod, policies, problems) {
  if (!/[:@]/.test(c.image.replace(/^[^/]*\//, "")) || /:latest$/.test(c.image))
    problems.push(`${c.name}: image "${c.image}" needs a fixed tag`);
  checkSecurity(c, pod, problems);
  checkResources(c, problems);
  for (const name of ["readinessProbe", "livenessProbe"]) if (!c[name]) problems.push(`${c.name}: ${name} is missing`);
  const mine = policiesFor(pod, policies).filter((np) => (np.spec.policyTypes || ["Ingress"]).includes("Ingress"));
  if (mine.length === 0) problems.push(`${c.name}: no NetworkPolicy limits who reaches the plan store`);
  for (const np of mine)
    for (const r of np.spec.ingress || [])
      if (!r.from || r.from.length === 0 || r.from.some((f) => !f.podSelector && !f.namespaceSelector && !f.ipBlock))
        problems.push(`${c.name}: NetworkPolicy ${np.metadata.name} admits every pod to the plan store`);
}

function checkContainer(doc, c, isInit, pod, configMaps, policies, problems) {
  const env = envOf(c, configMaps, problems);
  if (!/[:@]/.test(c.image.replace(/^[^/]*\//, "")) || /:latest$/.test(c.image))
    problems.push(`${c.name}: image "${c.image}" needs a fixed tag`);
  if (isInit && c.restartPolicy !== "Always")
    problems.push(`${c.name}: as an init container it must be a native sidecar (restartPolicy: Always)`);
  checkSecurity(c, pod, problems);
  checkResources(c, problems);
  checkProbes(c, env, problems);
  checkDrain(c, env, pod, problems);
  checkPlanStore(c, env, pod, policies, problems);
  checkTransportSecurity(c, env, pod, problems);
  const metrics = splitHostPort(env.PACKD_METRICS_LISTEN || "");
  const annotated = (pod.meta.annotations || {})["prometheus.io/port"];
  if (annotated !== undefined && (!metrics || Number(annotated) !== metrics.port))
    problems.push(`${c.name}: prometheus.io/port ${annotated} is not the metrics port of PACKD_METRICS_LISTEN`);
}

// True when every label of selector (matchLabels or a plain map) is in labels.
function selects(selector, labels) {
  const want = (selector && (selector.matchLabels || (selector.matchExpressions ? {} : selector))) || {};
  const keys = Object.keys(want);
  return keys.length > 0 && keys.every((k) => (labels || {})[k] === want[k]);
}

function checkSelectors(doc, workloads, problems) {
  const labelsOf = workloads.map((w) => podOf(w).meta.labels || {});
  const anyMatch = (sel) => labelsOf.some((l) => selects(sel, l));
  if (doc.kind === "Service") {
    if (!anyMatch(doc.spec.selector)) problems.push("its selector matches no rendered pod template");
    for (const p of doc.spec.ports || [])
      if (p.name === "grpc" && p.appProtocol !== "grpc") problems.push(`port "grpc" needs appProtocol: grpc`);
  } else if (doc.kind === "PodDisruptionBudget" || doc.kind === "ServiceMonitor") {
    if (doc.kind === "PodDisruptionBudget" && !anyMatch(doc.spec.selector))
      problems.push("its selector matches no rendered pod template");
  } else if (doc.kind === "NetworkPolicy") {
    if (!anyMatch(doc.spec.podSelector)) problems.push("its podSelector matches no rendered pod template");
  } else if (doc.kind === "HorizontalPodAutoscaler") {
    const ref = doc.spec.scaleTargetRef || {};
    if (!workloads.some((w) => w.kind === ref.kind && w.metadata.name === ref.name))
      problems.push(`scaleTargetRef ${ref.kind}/${ref.name} is not rendered`);
  }
  if (doc.kind === "Deployment" && !selects(doc.spec.selector, podOf(doc).meta.labels))
    problems.push("spec.selector does not match the pod template labels");
}

function checkPolicy(docs) {
  const result = new Map();
  const configMaps = new Map(docs.filter((d) => d.kind === "ConfigMap").map((d) => [d.metadata.name, d]));
  const workloads = docs.filter((d) => WORKLOAD_KINDS.has(d.kind));
  const policies = docs.filter((d) => d.kind === "NetworkPolicy");
  let packdContainers = 0;
  for (const doc of docs) {
    const problems = [];
    // Helm test hooks run packctl once; they are not a packd server.
    const hook = ((doc.metadata || {}).annotations || {})["helm.sh/hook"];
    if (WORKLOAD_KINDS.has(doc.kind) && hook === undefined) {
      const pod = podOf(doc);
      for (const c of pod.spec.containers || [])
        if (isPackd(c)) {
          packdContainers += 1;
          checkContainer(doc, c, false, pod, configMaps, policies, problems);
        } else if (isRedis(c)) {
          checkRedis(c, pod, policies, problems);
        }
      for (const c of pod.spec.initContainers || [])
        if (isPackd(c)) {
          packdContainers += 1;
          checkContainer(doc, c, true, pod, configMaps, policies, problems);
        }
    }
    checkSelectors(doc, workloads, problems);
    if (problems.length) result.set(doc, problems);
  }
  if (packdContainers === 0 && docs.length > 0) {
    const first = docs[0];
    result.set(first, [...(result.get(first) || []), "no packd container in the rendered objects"]);
  }
  return result;
}

module.exports = { checkPolicy };
