// The image the chart runs. No container engine here, so the Dockerfile is parsed and checked: it
// must build with the very scripts CI runs, ship what the agent and the chart's init containers
// call, and start the CLI the package declares.

import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const read = (path: string) => readFileSync(join(root, path), 'utf8');

interface Instruction {
  keyword: string;
  args: string;
}

interface Stage {
  image: string;
  name: string;
  instructions: Instruction[];
}

/** Stages of a Dockerfile: continuation lines joined, comments and the parser directive dropped. */
function parseDockerfile(text: string): Stage[] {
  const logicalLines: string[] = [];
  let pending = '';
  for (const line of text.split('\n')) {
    if (/^\s*#/.test(line)) continue;
    if (/\\\s*$/.test(line)) {
      pending += `${line.replace(/\\\s*$/, '')} `;
      continue;
    }
    const joined = (pending + line).trim();
    pending = '';
    if (joined) logicalLines.push(joined);
  }
  const stages: Stage[] = [];
  for (const line of logicalLines) {
    const match = /^(\S+)\s+(.*)$/s.exec(line);
    if (!match) throw new Error(`cannot parse Dockerfile line: ${line}`);
    const keyword = match[1]!.toUpperCase();
    const args = match[2]!.replace(/\s+/g, ' ');
    if (keyword === 'FROM') {
      const [image, as, name] = args.split(' ');
      expect(as?.toUpperCase(), `FROM ${args} names its stage`).toBe('AS');
      stages.push({ image: image!, name: name!, instructions: [] });
    } else {
      const stage = stages.at(-1);
      if (!stage) throw new Error(`${keyword} before the first FROM`);
      stage.instructions.push({ keyword, args });
    }
  }
  return stages;
}

const stages = parseDockerfile(read('Dockerfile'));
const [build, runtime] = stages;
const runs = (stage: Stage) => stage.instructions.filter((i) => i.keyword === 'RUN').map((i) => i.args);
const copies = (stage: Stage) => stage.instructions.filter((i) => i.keyword === 'COPY').map((i) => i.args);
const packageJson = JSON.parse(read('package.json'));

describe('Dockerfile', () => {
  it('has a Debian 12 Node 20 build stage and a bookworm-slim runtime stage', () => {
    expect(stages.map((s) => [s.image, s.name])).toEqual([
      ['node:20-bookworm', 'build'],
      ['debian:bookworm-slim', 'runtime'],
    ]);
  });

  it('builds with the install and build scripts CI runs, then drops dev dependencies', () => {
    const commands = runs(build!).join(' && ');
    const install = commands.indexOf('bash scripts/install-deps.sh');
    const compile = commands.indexOf('npm run build');
    const prune = commands.indexOf('npm prune --omit=dev');
    expect(install).toBeGreaterThanOrEqual(0);
    expect(compile).toBeGreaterThan(install);
    expect(prune).toBeGreaterThan(compile);
    // The same two scripts CI runs, so CI exercises the image's build.
    const ci = read('scripts/test.sh');
    expect(ci).toContain('bash scripts/install-deps.sh');
    expect(ci).toMatch(/npm run (--silent )?build/);
    expect(packageJson.scripts.build).toContain('scripts/build-bpf.sh');
  });

  it('skips the helm build in the image, and install-helm.sh honours that', () => {
    expect(build!.instructions).toContainEqual({ keyword: 'ENV', args: 'KBP_SKIP_HELM=1' });
    expect(read('scripts/install-deps.sh')).toContain('bash scripts/install-helm.sh');
    const skipped = spawnSync('bash', ['scripts/install-helm.sh'], {
      cwd: root,
      encoding: 'utf8',
      env: { PATH: '/usr/bin:/bin', KBP_SKIP_HELM: '1' },
    });
    expect(skipped.status, skipped.stderr).toBe(0);
    expect(skipped.stdout).toContain('not installing helm');
  });

  it('installs the runtime libraries and tools the data planes and the chart call', () => {
    const install = runs(runtime!).find((r) => r.includes('apt-get install'));
    const packages = new Set(install?.split(' '));
    for (const name of [
      'libbpf1',
      'iptables',
      'nftables',
      'ipset',
      'ipvsadm',
      'conntrack',
      'iproute2',
      'kmod',
      'mount',
    ]) {
      expect(packages.has(name), name).toBe(true);
    }
    expect(install).toContain('--no-install-recommends');
    expect(install).toContain('rm -rf /var/lib/apt/lists/*');
  });

  it("copies node and the built package from the build stage, and starts the package's CLI", () => {
    expect(copies(runtime!)).toEqual([
      '--from=build /usr/local/bin/node /usr/local/bin/node',
      '--from=build /src/package.json ./',
      '--from=build /src/node_modules ./node_modules',
      '--from=build /src/dist ./dist',
      '--from=build /src/bpf/*.o ./bpf/',
    ]);
    expect(runtime!.instructions).toContainEqual({ keyword: 'WORKDIR', args: '/opt/kube-bpf-proxy' });
    const entrypoint = runtime!.instructions.find((i) => i.keyword === 'ENTRYPOINT');
    expect(JSON.parse(entrypoint!.args)).toEqual([
      'node',
      `/opt/kube-bpf-proxy/${packageJson.bin['kube-bpf-proxy']}`,
    ]);
  });

  it('keeps build outputs and local tools out of the build context, but not the sources', () => {
    const ignored = read('.dockerignore')
      .split('\n')
      .map((l) => l.trim())
      .filter((l) => l && !l.startsWith('#'));
    for (const entry of ['.git', 'node_modules', 'dist', '.tools', 'bpf/*.o'])
      expect(ignored).toContain(entry);
    for (const needed of [
      'src',
      'scripts',
      'bpf',
      'native',
      'package.json',
      'package-lock.json',
      'tsconfig.json',
    ]) {
      expect(ignored).not.toContain(needed);
    }
  });
});
