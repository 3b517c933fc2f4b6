// Writes src/sources/k8s-proto.json: the protobuf schemas of the objects the kube source lists and
// watches, taken from the generated.proto files of the k8s.io/api and k8s.io/apimachinery Go
// modules (fetched through the Go module proxy with `go mod download`), pruned to the messages
// reachable from the lists, the watch event, the envelope and Status. Run by `npm run build`;
// skipped when the file is there for this version and these roots.

import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import protobuf from 'protobufjs';

/** The k8s.io/api and k8s.io/apimachinery version: Kubernetes v1.37.2's. */
const API_VERSION = 'v0.37.2';
const ROOTS = [
  'k8s.io.api.core.v1.ServiceList',
  'k8s.io.api.core.v1.NodeList',
  'k8s.io.api.discovery.v1.EndpointSliceList',
  'k8s.io.api.networking.v1.ServiceCIDRList',
  'k8s.io.apimachinery.pkg.runtime.Unknown',
  'k8s.io.apimachinery.pkg.apis.meta.v1.WatchEvent',
  'k8s.io.apimachinery.pkg.apis.meta.v1.Status',
];
const FILES = [
  'k8s.io/api/core/v1/generated.proto',
  'k8s.io/api/discovery/v1/generated.proto',
  'k8s.io/api/networking/v1/generated.proto',
  'k8s.io/apimachinery/pkg/runtime/generated.proto',
  'k8s.io/apimachinery/pkg/apis/meta/v1/generated.proto',
];

const out = join(dirname(fileURLToPath(import.meta.url)), '..', 'src', 'sources', 'k8s-proto.json');
// A file from an older checkout (another version, or fewer roots) is written again.
const fresh = (known) =>
  known.apiVersion === API_VERSION && JSON.stringify(known.roots) === JSON.stringify(ROOTS);
if (existsSync(out) && fresh(JSON.parse(readFileSync(out, 'utf8')))) process.exit(0);

const goBin = ['go', '/usr/local/go/bin/go'].find((bin) => {
  try {
    execFileSync(bin, ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
});
if (!goBin) throw new Error('k8s-proto: Go is needed to fetch the k8s.io/api schemas (go mod download)');
// `go mod download -json` prints one JSON object per module, each with the directory it landed in.
const downloaded = execFileSync(
  goBin,
  ['mod', 'download', '-json', `k8s.io/api@${API_VERSION}`, `k8s.io/apimachinery@${API_VERSION}`],
  { encoding: 'utf8', env: { ...process.env, GOFLAGS: '-mod=mod', GO111MODULE: 'on' }, cwd: '/' },
);
const dirs = new Map();
for (const chunk of downloaded.split(/\n(?=\{)/)) {
  const mod = JSON.parse(chunk);
  if (mod.Error) throw new Error(`go mod download ${mod.Path}@${mod.Version}: ${mod.Error}`);
  dirs.set(mod.Path, mod.Dir);
}

const root = new protobuf.Root();
// Imports name files as "k8s.io/<module>/<path>"; they live in the module's directory.
root.resolvePath = (_origin, target) => {
  for (const [module, dir] of dirs)
    if (target.startsWith(`${module}/`)) return join(dir, target.slice(module.length + 1));
  return target;
};
root.loadSync(FILES, { keepCase: true });
root.resolveAll();

// Every message reachable from the roots, by full name without the leading dot.
const keep = new Set();
const visit = (type) => {
  const name = type.fullName.slice(1);
  if (keep.has(name)) return;
  keep.add(name);
  for (const field of type.fieldsArray)
    if (field.resolvedType instanceof protobuf.Type) visit(field.resolvedType);
};
for (const name of ROOTS) visit(root.lookupType(name));

/** The namespace JSON with only the kept messages, and no namespace left empty. */
function prune(json, prefix) {
  const nested = {};
  for (const [name, value] of Object.entries(json.nested ?? {})) {
    const full = prefix ? `${prefix}.${name}` : name;
    if (value.fields) {
      if (keep.has(full)) nested[name] = { edition: value.edition, fields: value.fields };
    } else if (!value.values) {
      const inner = prune(value, full);
      if (Object.keys(inner.nested ?? {}).length > 0) nested[name] = inner;
    }
  }
  return { nested };
}

const schema = { apiVersion: API_VERSION, roots: ROOTS, root: prune(root.toJSON(), '') };
writeFileSync(out, `${JSON.stringify(schema)}\n`);
process.stdout.write(`k8s-proto: ${keep.size} messages from k8s.io/api ${API_VERSION} → ${out}\n`);
