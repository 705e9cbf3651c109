// Validates the manifests of deploy/kubernetes/ offline: every object against the
// Kubernetes API's schema (kubernetes-models, which ships it), then what the schema cannot
// say: each workload's image pull policy, probes, drain time, ports, scrape annotations,
// resource requests, Service and PodDisruptionBudget. Run with NODE_PATH naming kubernetes-models and js-yaml.
//
//   node .ci/kubernetes.js check FILE...   validate, print one line per object
//   node .ci/kubernetes.js args FILE       the workload container's args, one per line
//   node .ci/kubernetes.js image FILE      the workload container's image
"use strict";
const fs = require("fs");
const yaml = require("js-yaml");

function load(file) {
  return yaml.loadAll(fs.readFileSync(file, "utf8")).filter((doc) => doc !== null);
}

function model(doc) {
  const group = doc.apiVersion.includes("/") ? doc.apiVersion : `v1`;
  let module;
  try {
    module = require(`kubernetes-models/${group}`);
  } catch (err) {
    throw new Error(`unknown apiVersion ${JSON.stringify(doc.apiVersion)}`);
  }
  const Kind = module[doc.kind];
  if (typeof Kind !== "function") {
    throw new Error(`unknown kind ${JSON.stringify(doc.kind)} in ${doc.apiVersion}`);
  }
  return new Kind(doc);
}

function fail(where, message) {
  throw new Error(`${where}: ${message}`);
}

function flag(args, name) {
  const at = args.indexOf(name);
  return at < 0 ? undefined : args[at + 1];
}

function matches(selector, labels) {
  return Object.entries(selector || {}).every(([key, value]) => labels[key] === value);
}

function checkWorkload(file, workload, docs) {
  const where = `${file}: ${workload.kind} ${workload.metadata.name}`;
  const pod = workload.spec.template;
  const labels = pod.metadata.labels;
  if (!matches(workload.spec.selector.matchLabels, labels)) fail(where, "its selector does not match its pods");
  const containers = pod.spec.containers;
  if (containers.length !== 1) fail(where, `${containers.length} containers, expected 1`);
  const [container] = containers;
  // A :latest image (or one without a tag) is pulled on every start unless the policy says
  // otherwise, and then an image loaded into the nodes by hand is not found.
  const tag = /:([^:/]+)$/.exec(container.image || "");
  if ((!tag || tag[1] === "latest") && !["IfNotPresent", "Never"].includes(container.imagePullPolicy)) {
    fail(where, `image ${container.image} with imagePullPolicy ${container.imagePullPolicy || "unset (Always for :latest)"}: expected IfNotPresent or Never`);
  }
  const args = container.args || [];
  if (args[0] !== "serve") fail(where, `args start ${JSON.stringify(args[0])}, expected "serve"`);
  const port = Number((flag(args, "--listen") || "").split(":").pop());
  const named = (container.ports || []).find((p) => p.containerPort === port);
  if (!named) fail(where, `--listen port ${port} is not a containerPort`);
  const probePort = (probe) => (probe.httpGet.port === named.name || probe.httpGet.port === port);
  for (const [probe, path] of [["livenessProbe", "/livez"], ["readinessProbe", "/readyz"]]) {
    const got = container[probe];
    if (!got || !got.httpGet || got.httpGet.path !== path || !probePort(got)) {
      fail(where, `${probe} is not GET ${path} on port ${port}`);
    }
  }
  const drain = Number(flag(args, "--drain") || 10);
  const sleep = ((((container.lifecycle || {}).preStop || {}).sleep) || {}).seconds || 0;
  const grace = pod.spec.terminationGracePeriodSeconds ?? 30;
  if (grace <= sleep + drain) {
    fail(where, `terminationGracePeriodSeconds ${grace} leaves no time past the preStop sleep (${sleep} s) and --drain ${drain}`);
  }
  const notes = pod.metadata.annotations || {};
  if (notes["prometheus.io/scrape"] !== "true" || notes["prometheus.io/port"] !== String(port) ||
      notes["prometheus.io/path"] !== "/metrics") {
    fail(where, `the pods' prometheus.io annotations do not name /metrics on port ${port}`);
  }
  const requests = (container.resources || {}).requests || {};
  if (!requests.cpu || !requests.memory) fail(where, "no cpu and memory requests");
  const other = docs.filter((doc) => doc !== workload);
  if (!other.some((doc) => doc.kind === "Service" && matches(doc.spec.selector, labels) && (doc.spec.ports || []).some((p) => p.targetPort === named.name || p.targetPort === port))) {
    fail(where, `no Service selects its pods on port ${port}`);
  }
  if (!other.some((doc) => doc.kind === "PodDisruptionBudget" && matches(doc.spec.selector.matchLabels, labels))) {
    fail(where, "no PodDisruptionBudget selects its pods");
  }
  if (workload.kind === "StatefulSet") {
    if (!args.includes("--statefulset")) fail(where, "a StatefulSet's server takes no --statefulset");
    const dir = flag(args, "--high-water");
    const mount = (container.volumeMounts || []).find((m) => m.mountPath === dir);
    const claims = (workload.spec.volumeClaimTemplates || []).map((c) => c.metadata.name);
    if (!mount || !claims.includes(mount.name)) {
      fail(where, `--high-water ${dir} is not on a volume claim template's volume`);
    }
    if (!other.some((doc) => doc.kind === "Service" && doc.metadata.name === workload.spec.serviceName && doc.spec.clusterIP === "None")) {
      fail(where, `its serviceName ${workload.spec.serviceName} is no headless Service here`);
    }
  } else {
    const lease = flag(args, "--lease") || leaseFromEnv(where, container, other);
    if (!/^(etcds?|rediss?):\/\//.test(lease || "")) {
      fail(where, `a Deployment's server takes no lease of etcd or Redis (--lease or ATOMFLAKE_LEASE): its scheme is ${JSON.stringify((lease || "").split(":")[0])}`);
    }
    if (args.includes("--reclaim") && args.includes("--stay-stopped")) fail(where, "--reclaim and --stay-stopped both");
  }
  return container;
}

// The URL of the container's ATOMFLAKE_LEASE: its value, or the key of a Secret of the
// same file that it names.
function leaseFromEnv(where, container, docs) {
  const env = (container.env || []).find((e) => e.name === "ATOMFLAKE_LEASE");
  if (!env) return undefined;
  if (env.value !== undefined) return env.value;
  const ref = (env.valueFrom || {}).secretKeyRef;
  if (!ref) fail(where, "ATOMFLAKE_LEASE has neither a value nor a secretKeyRef");
  const secret = docs.find((doc) => doc.kind === "Secret" && doc.metadata.name === ref.name);
  const value = secret && (secret.stringData || {})[ref.key];
  if (value === undefined) fail(where, `ATOMFLAKE_LEASE names key ${ref.key} of Secret ${ref.name}, which this file does not hold`);
  return value;
}

function main(command, files) {
  if (command === "check") {
    for (const file of files) {
      const docs = load(file);
      for (const doc of docs) {
        try {
          model(doc).validate();
        } catch (err) {
          fail(`${file}: ${doc.kind} ${doc.metadata && doc.metadata.name}`, err.message);
        }
        console.log(`${file}: ${doc.apiVersion} ${doc.kind} ${doc.metadata.name}: valid`);
      }
      const workloads = docs.filter((doc) => doc.kind === "StatefulSet" || doc.kind === "Deployment");
      if (workloads.length !== 1) fail(file, `${workloads.length} workloads, expected 1`);
      checkWorkload(file, workloads[0], docs);
      console.log(`${file}: ${workloads[0].kind} ${workloads[0].metadata.name}: image pull policy, probes, drain, ports, requests, Service, PodDisruptionBudget checked`);
    }
  } else if ((command === "args" || command === "image") && files.length === 1) {
    const docs = load(files[0]);
    const workload = docs.find((doc) => doc.kind === "StatefulSet" || doc.kind === "Deployment");
    const [container] = workload.spec.template.spec.containers;
    if (command === "image") console.log(container.image);
    else for (const arg of container.args) console.log(arg);
  } else {
    console.error("usage: kubernetes.js check FILE... | args FILE | image FILE");
    process.exit(2);
  }
}

try {
  main(process.argv[2], process.argv.slice(3));
} catch (err) {
  console.error(`kubernetes.js: ${err.message}`);
  process.exit(1);
}
