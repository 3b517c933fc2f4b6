import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Command } from 'commander';
import { afterAll, describe, expect, test } from 'vitest';
import { CONFIG_FLAG_NAMES, readConfigFlags, registerConfigFlags } from '../../src/config/flags.js';
import { loadConfigFile } from '../../src/config/load.js';

function parse(argv: string[]): Command {
  const command = registerConfigFlags(new Command('run').exitOverride());
  command.parse(argv, { from: 'user' });
  return command;
}

const dir = mkdtempSync(join(tmpdir(), `kbp-config-${process.pid}-`));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('commander registration', () => {
  test("kube-proxy's flag names are all there", () => {
    for (const name of [
      'config',
      'proxy-mode',
      'hostname-override',
      'cluster-cidr',
      'nodeport-addresses',
      'masquerade-all',
      'iptables-masquerade-bit',
      'iptables-sync-period',
      'iptables-min-sync-period',
      'iptables-localhost-nodeports',
      'ipvs-scheduler',
      'ipvs-sync-period',
      'ipvs-min-sync-period',
      'ipvs-strict-arp',
      'ipvs-exclude-cidrs',
      'ipvs-tcp-timeout',
      'ipvs-tcpfin-timeout',
      'ipvs-udp-timeout',
      'metrics-bind-address',
      'healthz-bind-address',
      'bind-address',
      'bind-address-hard-fail',
      'kubeconfig',
      'master',
      'detect-local-mode',
      'pod-bridge-interface',
      'pod-interface-name-prefix',
      'feature-gates',
      'conntrack-max-per-core',
      'conntrack-min',
      'conntrack-tcp-timeout-established',
      'conntrack-tcp-timeout-close-wait',
      'conntrack-tcp-be-liberal',
      'conntrack-udp-timeout',
      'conntrack-udp-timeout-stream',
      'config-sync-period',
      'kube-api-qps',
      'kube-api-burst',
      'kube-api-content-type',
      'profiling',
      'min-sync-period',
      'sync-period',
      'oom-score-adj',
      'show-hidden-metrics-for-version',
      'v',
    ]) {
      expect(CONFIG_FLAG_NAMES).toContain(name);
    }
    const helpText = parse([]).helpInformation();
    expect(helpText).toContain('--bpf-scheduler <string>');
    expect(helpText).toContain('--sync-period <duration>');
    expect(helpText).toContain('--masquerade-all [bool]');
    expect(helpText).toContain('--bpf-map-size-backend-slots <int>');
    expect(helpText).toContain('-v, --v <int>');
  });

  test('only flags the user set are read, in the forms kube-proxy users write them', () => {
    const command = parse([
      '--proxy-mode=ipvs',
      '--masquerade-all',
      '--iptables-localhost-nodeports=false',
      '--nodeport-addresses',
      '10.0.0.0/8',
      '--nodeport-addresses=192.168.0.0/16,primary',
      '--feature-gates=ServiceTrafficDistribution=true',
      '-v',
      '3',
    ]);
    expect(readConfigFlags(command)).toEqual({
      'proxy-mode': 'ipvs',
      'masquerade-all': true,
      'iptables-localhost-nodeports': 'false',
      'nodeport-addresses': ['10.0.0.0/8', '192.168.0.0/16,primary'],
      'feature-gates': ['ServiceTrafficDistribution=true'],
      v: '3',
    });
  });

  test('options of the command that are not configuration are ignored', () => {
    const command = registerConfigFlags(new Command('run').exitOverride()).option('--dry-run');
    command.parse(['--dry-run', '--sync-period=10s'], { from: 'user' });
    expect(readConfigFlags(command)).toEqual({ 'sync-period': '10s' });
  });
});

describe('loadConfigFile', () => {
  test('reads the file and puts the flags on top', async () => {
    const path = join(dir, 'config.conf');
    writeFileSync(
      path,
      'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: iptables\nhostnameOverride: file-node\nclusterCIDR: 10.244.0.0/16\n',
    );
    const command = parse([`--config=${path}`, '--hostname-override', 'flag-node', '--masquerade-all']);
    const flags = readConfigFlags(command);
    const result = await loadConfigFile(flags.config as string, flags);
    expect(result.ok).toBe(true);
    if (!result.ok) return;
    expect(result.config.mode).toBe('iptables');
    expect(result.config.hostnameOverride).toBe('flag-node');
    expect(result.config.masqueradeAll).toBe(true);
    expect(result.config.clusterCIDRs).toEqual(['10.244.0.0/16']);
  });

  test('bpf.maglevFrontends and bpf.mapSizes.backendCounters from the file, the flag on top', async () => {
    const path = join(dir, 'maglev.conf');
    writeFileSync(
      path,
      'apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nbpf:\n  scheduler: maglev\n  maglevFrontends: all\n  mapSizes:\n    backendCounters: 4096\n',
    );
    const fromFile = await loadConfigFile(path, {});
    expect(
      fromFile.ok && [fromFile.config.bpf.maglevFrontends, fromFile.config.bpf.mapSizes.backendCounters],
    ).toEqual(['all', 4096]);
    const flags = readConfigFlags(parse([`--config=${path}`, '--bpf-maglev-frontends', 'external']));
    const result = await loadConfigFile(path, flags);
    expect(result.ok && result.config.bpf.maglevFrontends).toBe('external');
  });

  test('without --config, flags and defaults only', async () => {
    const result = await loadConfigFile(undefined, { 'proxy-mode': 'nftables' });
    expect(result.ok && result.config.mode).toBe('nftables');
  });

  test('an unreadable file is a problem of --config', async () => {
    const result = await loadConfigFile(join(dir, 'missing.conf'), {});
    expect(result.ok).toBe(false);
    if (result.ok) return;
    expect(result.problems).toHaveLength(1);
    expect(result.problems[0]?.path).toBe('--config');
    expect(result.problems[0]?.message).toMatch(/^cannot read .*missing\.conf: ENOENT/);
  });
});
