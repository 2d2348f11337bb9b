#!/usr/bin/env node
// Validates rendered Kubernetes objects offline, with no API server.
//
//   node validate.js [--policy] FILE...      (FILE "-" reads standard input)
//
// Each YAML document is checked three ways:
//   1. schema: the JSON schema of its apiVersion/kind from the npm package
//      kubernetes-models (Kubernetes 1.28 API; Prometheus Operator CRDs from
//      @kubernetes-models/prometheus-operator). A kind with no schema fails.
//   2. unknown fields: the schema validators read every field they know, so
//      the document is wrapped in a Proxy that records each read; any field
//      the validator never read is unknown to the API (a typo such as
//      "readinesProbe" or "prot:"), which `kubectl apply` would reject.
//   3. with --policy, the rules packd's deployment must keep (policy.js):
//      restricted security context, probes on the right port, resources,
//      drain time below the termination grace period, selectors that match.
// It prints one line per object and a closing "N passed, N failed" line, and
// exits 1 when anything failed, 2 on a usage or read error.
"use strict";

const fs = require("fs");
const yaml = require("js-yaml");
const { checkPolicy } = require("./policy.js");

// Finds the kubernetes-models class for apiVersion/kind, or null.
function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string") return null;
  const slash = apiVersion.indexOf("/");
  const group = slash < 0 ? "" : apiVersion.slice(0, slash);
  const version = slash < 0 ? apiVersion : apiVersion.slice(slash + 1);
  const safe = /^[A-Za-z0-9.-]+$/;
  if (!safe.test(version) || !safe.test(kind) || (group && !safe.test(group))) return null;
  let modulePath;
  if (group === "") modulePath = `kubernetes-models/${version}/${kind}`;
  else if (group === "monitoring.coreos.com")
    modulePath = `@kubernetes-models/prometheus-operator/${group}/${version}/${kind}`;
  else modulePath = `kubernetes-models/${group}/${version}/${kind}`;
  try {
    return require(modulePath)[kind] || null;
  } catch (err) {
    if (err && err.code === "MODULE_NOT_FOUND") return null;
    throw err;
  }
}

// Wraps value so that every property read is recorded in reads (a Map from
// the wrapped object to the Set of keys read on it).
function tracked(value, reads, cache) {
  if (value === null || typeof value !== "object") return value;
  if (cache.has(value)) return cache.get(value);
  if (!reads.has(value)) reads.set(value, new Set());
  const proxy = new Proxy(value, {
    get(target, key) {
      if (typeof key === "string") reads.get(target).add(key);
      return tracked(target[key], reads, cache);
    },
    has(target, key) {
      if (typeof key === "string") reads.get(target).add(key);
      return key in target;
    },
  });
  cache.set(value, proxy);
  return proxy;
}

// Lists the paths of fields that the validator never read.
function unknownFields(value, reads, path, out) {
  if (value === null || typeof value !== "object") return out;
  if (Array.isArray(value)) {
    value.forEach((item, i) => unknownFields(item, reads, `${path}/${i}`, out));
    return out;
  }
  const seen = reads.get(value) || new Set();
  for (const key of Object.keys(value)) {
    if (!seen.has(key)) out.push(`${path}/${key}`);
    else unknownFields(value[key], reads, `${path}/${key}`, out);
  }
  return out;
}

// Returns the list of problems of one object (empty when it is valid).
function checkSchema(doc) {
  const Model = modelFor(doc.apiVersion, doc.kind);
  if (!Model) return [`no schema for apiVersion "${doc.apiVersion}" kind "${doc.kind}"`];
  const reads = new Map();
  const problems = [];
  try {
    Model.prototype.validate.call(tracked(doc, reads, new WeakMap()));
  } catch (err) {
    if (!err || !Array.isArray(err.errors)) throw err;
    for (const e of err.errors) problems.push(`${e.instancePath || "/"} ${e.message}`);
  }
  // Only report unknown fields when the schema itself passed; ajv stops
  // reading an object at the first type error.
  if (problems.length === 0) {
    for (const p of unknownFields(doc, reads, "", [])) problems.push(`${p} is not a field of ${doc.kind}`);
  }
  if (!doc.metadata || typeof doc.metadata.name !== "string" || doc.metadata.name === "")
    problems.push("/metadata/name is missing");
  return problems;
}

function readDocs(file) {
  const text = fs.readFileSync(file === "-" ? 0 : file, "utf8");
  const docs = [];
  yaml.loadAll(text, (doc) => {
    if (doc !== null && doc !== undefined) docs.push(doc);
  });
  return docs;
}

function main(argv) {
  const policy = argv.includes("--policy");
  const files = argv.filter((a) => a !== "--policy");
  if (files.length === 0 || files.some((f) => f.startsWith("--") || f === "-h")) {
    process.stderr.write("usage: node validate.js [--policy] FILE... (\"-\" reads standard input)\n");
    return 2;
  }
  let passed = 0;
  let failed = 0;
  for (const file of files) {
    let docs;
    try {
      docs = readDocs(file);
    } catch (err) {
      process.stderr.write(`${file}: cannot read or parse: ${err.message}\n`);
      return 2;
    }
    if (docs.length === 0) {
      process.stdout.write(`FAIL ${file}: no Kubernetes objects in the file\n`);
      failed += 1;
      continue;
    }
    const byDoc = new Map(docs.map((d) => [d, checkSchema(d)]));
    const names = new Set();
    for (const d of docs) {
      const id = `${d.apiVersion}/${d.kind}/${d.metadata && d.metadata.namespace}/${d.metadata && d.metadata.name}`;
      if (names.has(id)) byDoc.get(d).push("the same object appears twice");
      names.add(id);
    }
    if (policy) {
      for (const [d, problems] of checkPolicy(docs)) byDoc.get(d).push(...problems);
    }
    for (const [d, problems] of byDoc) {
      const label = `${file}: ${d.kind}/${d.metadata && d.metadata.name}`;
      if (problems.length === 0) {
        passed += 1;
        process.stdout.write(`ok   ${label}\n`);
      } else {
        failed += 1;
        process.stdout.write(`FAIL ${label}\n`);
        for (const p of problems) process.stdout.write(`       ${p}\n`);
      }
    }
  }
  process.stdout.write(`validate: ${passed} passed, ${failed} failed\n`);
  return failed === 0 ? 0 : 1;
}

process.exitCode = main(process.argv.slice(2));
