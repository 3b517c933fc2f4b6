// The image the chart runs, as scripts/build-image.sh (the only way it is built) defines it:
// checked here without building it; test/e2e/image.test.ts and the pod variant of
// test/e2e/real-node.test.ts build-and-run it for real.

import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse } from 'yaml';

const root = resolve(import.meta.dirname, '../..');
const read = (path: string) => readFileSync(join(root, path), 'utf8');
const script = read('scripts/build-image.sh');
const packageJson = JSON.parse(read('package.json'));

/** A bash array assignment of build-image.sh, e.g. PACKAGES=(a b c). */
function bashArray(name: string): string[] {
  const match = new RegExp(`^${name}=\\(([^)]*)\\)`, 'm').exec(script);
  if (!match) throw new Error(`no ${name}=(...) in build-image.sh`);
  return match[1]!.split(/\s+/).filter(Boolean);
}

function sources(dir: string): string[] {
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(join(root, path)).isDirectory()) return sources(path);
    return path.endsWith('.ts') ? [path] : [];
  });
}

// The Debian package of each program the agent runs (src/, without the lab and the commands that
// build one: demo and bench run in a checkout, not in the image). minbase: in every image.
const PACKAGE_OF: Record<string, string> = {
  ip: 'iproute2',
  tc: 'iproute2',
  nft: 'nftables',
  ipset: 'ipset',
  ipvsadm: 'ipvsadm',
  conntrack: 'conntrack',
  nfacct: 'nfacct',
  sysctl: 'procps',
  setpriv: 'minbase',
  uname: 'minbase',
};

describe('scripts/build-image.sh', () => {
  const packages = bashArray('PACKAGES');

  it('installs a Debian package for every program the agent runs', () => {
    const programs = new Set<string>();
    for (const file of [...sources('src'), ...sources('native')]) {
      if (/^src\/(lab|cli\/(demo|bench))/.test(file)) continue;
      for (const match of read(file).matchAll(/(?:exec|execFileAsync|spawn)\(\s*'([a-z0-9_-]+)'/g)) {
        programs.add(match[1]!);
      }
      if (/iptablesBinary\(/.test(read(file))) programs.add('iptables');
    }
    expect(programs.size).toBeGreaterThan(5);
    for (const program of programs) {
      const pkg = program === 'iptables' ? 'iptables' : PACKAGE_OF[program];
      expect(pkg, `${program}: which Debian package?`).toBeDefined();
      if (pkg !== 'minbase') expect(packages, program).toContain(pkg);
    }
    // koffi loads libbpf.so.1; Node needs libstdc++.
    expect(packages).toEqual(expect.arrayContaining(['libbpf1', 'libstdc++6']));
  });

  it('removes the package manager and ships no compiler', () => {
    expect(bashArray('PURGE')).toEqual(expect.arrayContaining(['apt', 'dpkg', 'perl-base', 'debconf']));
    for (const tool of ['gcc', 'clang', 'build-essential', 'make', 'python3'])
      expect(packages).not.toContain(tool);
    expect(script).toContain('--variant=minbase');
    expect(script).toContain('--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr');
  });

  it('pins Node 20 by version and integrity, and installs only production dependencies', () => {
    expect(script).toMatch(/^NODE_VERSION=20\.\d+\.\d+$/m);
    expect(script).toMatch(/^NODE_INTEGRITY=sha512-[A-Za-z0-9+/=]+$/m);
    expect(script).toContain('npm ci --omit=dev');
    expect(packageJson.engines.node).toMatch(/^>=20/);
  });

  it('compiles the production build from the CLI entry point: no tests, no source maps', () => {
    const config = JSON.parse(read('tsconfig.build.json'));
    expect(config.files).toEqual(['src/cli/main.ts']);
    expect(config.include).toEqual([]);
    expect(config.compilerOptions.sourceMap).toBe(false);
    expect(script).toContain('tsc -p tsconfig.build.json');
    // Nothing the CLI imports reaches into test/.
    for (const file of [...sources('src'), ...sources('bench'), ...sources('native')]) {
      expect(read(file), file).not.toMatch(/from '(\.\.\/)+test\//);
    }
  });

  it("starts the package's CLI, under the name and tag the chart's defaults pull", () => {
    expect(script).toContain(
      `--entrypoint /usr/local/bin/node --entrypoint /opt/kube-bpf-proxy/${packageJson.bin['kube-bpf-proxy']}`,
    );
    const chart = parse(read('charts/kube-bpf-proxy/Chart.yaml'));
    const values = parse(read('charts/kube-bpf-proxy/values.yaml'));
    expect(chart.appVersion).toBe(packageJson.version);
    expect(script).toContain(`tag=\${tag:-${values.image.repository}:$version}`);
    for (const label of ['version', 'revision', 'source', 'created']) {
      expect(script).toContain(`org.opencontainers.image.${label}=`);
    }
  });
});
