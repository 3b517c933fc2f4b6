import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { buildProgram } from '../../src/cli/program.js';
import { writeMalformedCorpus } from '../support/malformed-corpus.js';

/** Runs the CLI in-process and captures what it prints. */
async function cli(args: string[]): Promise<{ stdout: string; stderr: string; exitCode: number }> {
  let stdout = '';
  let stderr = '';
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
    stdout += String(chunk);
    return true;
  });
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
    stderr += String(chunk);
    return true;
  });
  process.exitCode = 0;
  try {
    const argv = ['node', 'kube-bpf-proxy', ...args];
    await (await buildProgram(argv)).exitOverride().parseAsync(argv);
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
  const exitCode = Number(process.exitCode ?? 0);
  process.exitCode = 0;
  return { stdout, stderr, exitCode };
}

const EXAMPLES = ['--manifests', 'examples/manifests', '--node-env', 'examples/node-env.json'];

describe('render', () => {
  afterEach(() => {
    process.exitCode = 0;
  });

  it('prints the decisions of the examples as JSON', async () => {
    const { stdout, exitCode } = await cli([
      'render',
      ...EXAMPLES,
      '--config',
      'examples/config.yaml',
      '--output',
      'json',
    ]);
    expect(exitCode).toBe(0);
    const json = JSON.parse(stdout);
    expect(json.formatVersion).toBe(1);
    expect(json.nodeName).toBe('node-a');
    const web = json.families[0].servicePorts.find(
      (sp: { servicePortName: string }) => sp.servicePortName === 'demo/web:http',
    );
    expect(web).toMatchObject({
      clusterIP: '10.96.0.10',
      port: 80,
      protocol: 'TCP',
      topologyMode: 'PreferSameZone',
    });
    expect(web.clusterEndpoints).toEqual(['10.244.1.10:8080', '10.244.1.11:8080']);
    const local = json.families[0].servicePorts.find(
      (sp: { servicePortName: string }) => sp.servicePortName === 'demo/web-local:http',
    );
    expect(local).toMatchObject({
      externalTrafficPolicy: 'Local',
      healthCheckNodePort: 32000,
      loadBalancerIPs: ['198.51.100.10'],
    });
    expect(local.localEndpoints).toEqual(['10.244.1.10:8080', '10.244.1.11:8080']);
    // examples/manifests/service-cidr.yaml
    expect(json.families[0].serviceCIDRs).toEqual(['10.96.0.0/16']);
  });

  it('prints exactly one family of iptables-restore input with --ip-family', async () => {
    const { stdout } = await cli(['render', ...EXAMPLES, '--proxy-mode', 'iptables', '--ip-family', 'IPv4']);
    expect(stdout.startsWith('*filter\n')).toBe(true);
    expect(stdout).toContain(
      '-A KUBE-SERVICES -m comment --comment "demo/web:http cluster IP" -m tcp -p tcp -d 10.96.0.10 --dport 80',
    );
    expect(stdout.trimEnd().endsWith('COMMIT')).toBe(true);
  });

  it('heads each family with a comment line without --ip-family', async () => {
    const { stdout } = await cli(['render', ...EXAMPLES, '--proxy-mode', 'iptables']);
    expect(stdout.split('\n')[0]).toBe('# IPv4 (iptables-restore)');
  });

  it('prints the nftables transaction with --proxy-mode nftables (NodePorts on the primary IP)', async () => {
    const { stdout } = await cli(['render', ...EXAMPLES, '--proxy-mode', 'nftables', '--ip-family', 'IPv4']);
    expect(stdout.startsWith('add table ip kube-proxy { comment "rules for kube-proxy" ; }\n')).toBe(true);
    expect(stdout).toContain('add element ip kube-proxy nodeport-ips { 10.10.0.1 }\n');
    expect(stdout).toMatch(
      /add element ip kube-proxy service-ips \{ 10\.96\.0\.10 \. tcp \. 80 : goto service-[A-Z2-7]{8}-demo\/web\/tcp\/http \}/,
    );
    expect(stdout).toContain(
      'add rule ip kube-proxy cluster-ips-check ip daddr { 10.96.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"\n',
    );
  });

  it('renders the ServiceCIDRs of the manifests into cluster-ips-check per family, and no drop rule without any', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'kbp-render-cidrs-'));
    try {
      writeFileSync(
        join(dir, 'cidrs.yaml'),
        [
          'apiVersion: networking.k8s.io/v1',
          'kind: ServiceCIDR',
          'metadata: { name: kubernetes }',
          'spec: { cidrs: [10.96.0.0/16, "fd00:96::/112"] }',
          '---',
          'apiVersion: networking.k8s.io/v1',
          'kind: ServiceCIDRList',
          'items:',
          '  - metadata: { name: more }',
          '    spec: { cidrs: [10.100.0.0/16] }',
          '',
        ].join('\n'),
      );
      const dual = ['--node-env', join(dir, 'env.json')];
      writeFileSync(
        join(dir, 'env.json'),
        JSON.stringify({ nodeName: 'node-a', nodeIPs: ['10.10.0.1', 'fd00:10::1'], interfaces: [] }),
      );
      const nft = await cli([
        'render',
        '--manifests',
        join(dir, 'cidrs.yaml'),
        ...dual,
        '--proxy-mode',
        'nftables',
      ]);
      expect(nft.stderr).toBe('');
      const drops = nft.stdout.split('\n').filter((line) => line.includes('unallocated ClusterIPs'));
      expect(drops).toEqual([
        'add rule ip kube-proxy cluster-ips-check ip daddr { 10.96.0.0/16,10.100.0.0/16 } drop comment "Drop traffic to unallocated ClusterIPs"',
        'add rule ip6 kube-proxy cluster-ips-check ip6 daddr { fd00:96::/112 } drop comment "Drop traffic to unallocated ClusterIPs"',
      ]);
      const json = JSON.parse(
        (await cli(['render', '--manifests', join(dir, 'cidrs.yaml'), ...dual, '--output', 'json'])).stdout,
      );
      expect(json.families.map((f: { serviceCIDRs: string[] }) => f.serviceCIDRs)).toEqual([
        ['10.96.0.0/16', '10.100.0.0/16'],
        ['fd00:96::/112'],
      ]);
      const text = await cli(['render', '--manifests', join(dir, 'cidrs.yaml'), ...dual]);
      expect(text.stdout).toContain('IPv6 (node IP fd00:10::1, 0 service ports, ServiceCIDRs fd00:96::/112)');
      const none = await cli([
        'render',
        '--manifests',
        'examples/manifests/web.yaml',
        ...dual,
        '--proxy-mode',
        'nftables',
      ]);
      expect(none.stdout).toContain('cluster-ips-check ip daddr @cluster-ips reject');
      expect(none.stdout).not.toContain('unallocated ClusterIPs');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('prints virtual servers, ipsets and companion rules with --proxy-mode ipvs (NodePorts per node address)', async () => {
    const { stdout } = await cli(['render', ...EXAMPLES, '--proxy-mode', 'ipvs', '--ip-family', 'IPv4']);
    expect(stdout.startsWith('# IPv4 virtual servers (ipvsadm-save -n; ipvsadm -R reads it)\n')).toBe(true);
    expect(stdout).toContain(
      '-A -t 10.10.0.1:30080 -s rr\n-a -t 10.10.0.1:30080 -r 10.244.1.10:8080 -m -w 1\n',
    );
    expect(stdout).toContain(
      'create KUBE-NODE-PORT-TCP bitmap:port range 0-65535 comment\nadd KUBE-NODE-PORT-TCP 30080\n',
    );
    expect(stdout).toContain('*nat\n:KUBE-SERVICES - [0:0]\n');
  });

  it('prints the bpf frontends with their backend slots with --proxy-mode bpf (eTP=Local: two scopes)', async () => {
    const { stdout } = await cli(['render', ...EXAMPLES, '--proxy-mode', 'bpf', '--ip-family', 'IPv4']);
    expect(stdout).toMatch(
      /^TCP\/10\.96\.0\.10:80 {2}ClusterIP {2}demo\/web:http {2}svc \d+ {2}forward {2}random\n {2}slot 0 {2}backend \d+ {2}10\.244\.1\.10:8080 {2}\(local\)$/m,
    );
    // eTP=Local: external traffic reaches the local endpoints, pods reach all of them.
    expect(stdout).toMatch(
      /^TCP\/\*:30081 {2}NodePort {2}demo\/web-local:http {2}svc \d+ {2}forward {2}random {2}\[local-only two-scopes\]$/m,
    );
    expect(stdout).toMatch(
      /^TCP\/\*:30081 \(pods\) {2}NodePort {2}demo\/web-local:http {2}svc \d+ {2}forward/m,
    );
  });

  it('refuses an invalid configuration with every problem and its path', async () => {
    await expect(cli(['render', ...EXAMPLES, '--iptables-masquerade-bit', '40'])).rejects.toThrow(
      /iptables\.masqueradeBit/,
    );
  });

  describe('with hundreds of malformed objects among good ones', () => {
    const root = mkdtempSync(join(tmpdir(), `kbp-render-bad-${process.pid}-`));
    afterAll(() => rmSync(root, { recursive: true, force: true }));
    const corpus = writeMalformedCorpus(root);

    it('reports each malformed object on stderr, renders the rest, and exits 0 (1 with --strict)', async () => {
      const { stdout, stderr, exitCode } = await cli([
        'render',
        '--manifests',
        root,
        '--hostname-override',
        'node-a',
        '--output',
        'json',
      ]);
      expect(exitCode).toBe(0);
      const skippedLines = stderr.split('\n').filter((line) => line.startsWith('skipped: '));
      expect(corpus.malformed.length).toBeGreaterThanOrEqual(200);
      const json = JSON.parse(stdout);
      // Nodes other than this one are not even read (kube-proxy watches its own Node only).
      const ignoredOrigins = new Set(json.ignored.map((i: { origin: string }) => i.origin));
      for (const bad of corpus.malformed) {
        const reported = skippedLines.some((line) => line.startsWith(`skipped: ${bad.origin} `));
        expect(reported || (bad.kind === 'Node' && ignoredOrigins.has(bad.origin)), bad.origin).toBe(true);
      }
      const goodServices = corpus.good.filter((p) => p.kind === 'Service');
      const rendered = new Set(
        json.families.flatMap((f: { servicePorts: { name: string }[] }) =>
          f.servicePorts.map((sp) => sp.name),
        ),
      );
      for (const svc of goodServices)
        expect(rendered.has(svc.object.metadata.name), svc.object.metadata.name).toBe(true);
      expect(json.skipped.length).toBe(skippedLines.length);
      expect(skippedLines.length).toBeGreaterThanOrEqual(200);

      const strict = await cli([
        'render',
        '--manifests',
        root,
        '--hostname-override',
        'node-a',
        '--output',
        'json',
        '--strict',
      ]);
      expect(strict.exitCode).toBe(1);
    });
  });
});
