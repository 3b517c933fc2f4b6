#!/usr/bin/env node
// Writes an OCI image archive (an image layout in a tar, what `podman load`, `ctr images import`
// and `skopeo copy oci-archive:` read) from layer tarballs, deterministically: the same layers and
// arguments give the same bytes. Used by scripts/build-image.sh and scripts/install-cluster.sh; needs
// only Node, tar and gzip.
//
//   node scripts/oci-archive.mjs --out FILE --tag NAME:TAG --created EPOCH [--created-by SCRIPT]
//     --layer TAR=DESCRIPTION... --entrypoint ARG... [--cmd ARG...] --env K=V... --workdir DIR
//     --label K=V...
//
// A --layer that is a directory is archived here, its files owned by root and dated --created.

import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';

const { values } = parseArgs({
  options: {
    out: { type: 'string' },
    tag: { type: 'string' },
    created: { type: 'string' },
    'created-by': { type: 'string', default: 'scripts/build-image.sh' },
    layer: { type: 'string', multiple: true, default: [] },
    entrypoint: { type: 'string', multiple: true, default: [] },
    cmd: { type: 'string', multiple: true, default: [] },
    env: { type: 'string', multiple: true, default: [] },
    workdir: { type: 'string', default: '/' },
    label: { type: 'string', multiple: true, default: [] },
  },
});
if (!values.out || !values.tag || !values.created || values.layer.length === 0) {
  throw new Error('oci-archive.mjs: --out, --tag, --created and at least one --layer are required');
}

const created = new Date(Number(values.created) * 1000).toISOString().replace('.000Z', 'Z');
const labels = Object.fromEntries(
  values.label.map((label) => [label.slice(0, label.indexOf('=')), label.slice(label.indexOf('=') + 1)]),
);
const layout = mkdtempSync(join(tmpdir(), 'kbp-oci-'));
const blobs = join(layout, 'blobs', 'sha256');
mkdirSync(blobs, { recursive: true });

const sha256 = (data) => createHash('sha256').update(data).digest('hex');
function writeBlob(data) {
  const digest = sha256(data);
  writeFileSync(join(blobs, digest), data);
  return { digest: `sha256:${digest}`, size: data.length };
}
const json = (value) => Buffer.from(JSON.stringify(value));

// The same files give the same tar: sorted names, one mtime, root owns everything, no atime/ctime.
function reproducibleTar(dir, out, paths) {
  execFileSync('tar', [
    '-C',
    dir,
    '--sort=name',
    `--mtime=@${values.created}`,
    '--owner=0',
    '--group=0',
    '--numeric-owner',
    '--format=posix',
    '--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime',
    '-cf',
    out,
    ...paths,
  ]);
}
const scratch = mkdtempSync(join(tmpdir(), 'kbp-oci-layers-'));
function layerTar(path, index) {
  if (!statSync(path).isDirectory()) return path;
  const out = join(scratch, `${index}.tar`);
  // Its entries, not '.': the image's root directory keeps the base layer's mode.
  reproducibleTar(path, out, readdirSync(path).sort());
  return out;
}

const layers = [];
const diffIds = [];
const history = [];
for (const [index, spec] of values.layer.entries()) {
  const [path, comment = ''] = [spec.slice(0, spec.indexOf('=')), spec.slice(spec.indexOf('=') + 1)];
  const file = layerTar(path, index);
  const tar = readFileSync(file);
  diffIds.push(`sha256:${sha256(tar)}`);
  // gzip -n: no name, no timestamp in the header. FILE.gz, when there, is that output already
  // (build-image.sh caches the base layer's).
  const gz = existsSync(`${file}.gz`)
    ? readFileSync(`${file}.gz`)
    : execFileSync('gzip', ['-n', '-9', '-c', file], { maxBuffer: 1 << 30 });
  layers.push({ mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip', ...writeBlob(gz) });
  history.push({ created, created_by: values['created-by'], comment });
}

const config = writeBlob(
  json({
    created,
    architecture: 'amd64',
    os: 'linux',
    config: {
      Entrypoint: values.entrypoint,
      ...(values.cmd.length > 0 ? { Cmd: values.cmd } : {}),
      Env: values.env,
      WorkingDir: values.workdir,
      Labels: labels,
    },
    rootfs: { type: 'layers', diff_ids: diffIds },
    history,
  }),
);
const manifestBytes = json({
  schemaVersion: 2,
  mediaType: 'application/vnd.oci.image.manifest.v1+json',
  config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
  layers,
  annotations: labels,
});
const manifest = writeBlob(manifestBytes);
// ref.name: the name podman and skopeo give the image; io.containerd.image.name: the one
// `ctr images import` gives it, normalized as the kubelet normalizes the chart's image reference.
const fullName = values.tag.includes('/') ? values.tag : `docker.io/library/${values.tag}`;
writeFileSync(
  join(layout, 'index.json'),
  json({
    schemaVersion: 2,
    mediaType: 'application/vnd.oci.image.index.v1+json',
    manifests: [
      {
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        ...manifest,
        annotations: {
          'org.opencontainers.image.ref.name': values.tag,
          'io.containerd.image.name': fullName,
        },
      },
    ],
  }),
);
writeFileSync(join(layout, 'oci-layout'), json({ imageLayoutVersion: '1.0.0' }));

const partial = `${values.out}.partial`;
reproducibleTar(layout, partial, ['oci-layout', 'index.json', 'blobs']);
renameSync(partial, values.out);
rmSync(layout, { recursive: true, force: true });
rmSync(scratch, { recursive: true, force: true });
process.stdout.write(
  `${JSON.stringify({ manifest: manifest.digest, layers: layers.map((l) => ({ digest: l.digest, size: l.size })) })}\n`,
);
