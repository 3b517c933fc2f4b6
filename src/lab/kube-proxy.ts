// The real kube-proxy (built by scripts/install-control-plane.sh from the same Kubernetes release as
// the API server) in a lab namespace, as the differential test and the benchmark run it: the
// KubeProxyConfiguration both it and our agent read, the iptables backend it is given, its klog
// lines read as syncs, its memory, and its stop.

import type { ChildProcess } from 'node:child_process';
import { mkdirSync, rmSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import type { IPFamily } from '../net/ip.js';
import { processMemory, stopAgentProcess } from './agent.js';
import { AgentLog, type LogLineReading } from './agent-log.js';
import type { Lab } from './netns.js';

export type RuleMode = 'iptables' | 'nftables' | 'ipvs';

export interface ProxyConfigOptions {
  /** The proxy mode (our agent's bpf too: it reads the same file). */
  mode: string;
  hostname: string;
  clusterCIDR: string;
  kubeconfig: string;
  /** The mode section's syncPeriod; absent: kube-proxy's default (30 s, minSyncPeriod 1 s). */
  syncPeriod?: string;
  /** ipvs mode: its section's scheduler; absent: kube-proxy's default (rr). */
  ipvsScheduler?: string;
  /** clientConnection.contentType; absent: kube-proxy's default (protobuf). */
  contentType?: string;
  /** Lines appended as they are (our agent's bpf section). */
  extraLines?: string[];
  /**
   * The `conntrack:` section's fields, one a line ("min: 131072"). Absent: zeros, which leave every
   * conntrack sysctl alone (nf_conntrack_max is one for the whole host, not the lab namespace's).
   */
  conntrack?: string[];
}

const LEAVE_CONNTRACK_ALONE = [
  'maxPerCore: 0',
  'min: 0',
  'tcpEstablishedTimeout: 0s',
  'tcpCloseWaitTimeout: 0s',
];

/** One KubeProxyConfiguration for kube-proxy and for our agent, so both run with the same settings. */
export function kubeProxyConfig(o: ProxyConfigOptions): string {
  if (o.ipvsScheduler && o.mode !== 'ipvs')
    throw new Error(`kubeProxyConfig: an ipvs scheduler in ${o.mode} mode`);
  // In the mode's own section: v1alpha1 has no top-level syncPeriod/minSyncPeriod (kube-proxy
  // decodes the file leniently and ignores them; ours would apply them).
  const modeSection = [
    ...(o.syncPeriod ? [`  syncPeriod: ${o.syncPeriod}`] : []),
    ...(o.ipvsScheduler ? [`  scheduler: ${o.ipvsScheduler}`] : []),
  ];
  return [
    'apiVersion: kubeproxy.config.k8s.io/v1alpha1',
    'kind: KubeProxyConfiguration',
    `mode: ${o.mode}`,
    `hostnameOverride: ${o.hostname}`,
    `clusterCIDR: ${o.clusterCIDR}`,
    'clientConnection:',
    `  kubeconfig: ${o.kubeconfig}`,
    ...(o.contentType ? [`  contentType: ${o.contentType}`] : []),
    'metricsBindAddress: 127.0.0.1:10249',
    'healthzBindAddress: 0.0.0.0:10256',
    'conntrack:',
    ...(o.conntrack ?? LEAVE_CONNTRACK_ALONE).map((line) => `  ${line}`),
    ...(modeSection.length > 0 ? [`${o.mode}:`, ...modeSection] : []),
    ...(o.extraLines ?? []),
    '',
  ].join('\n');
}

const IPTABLES_COMMANDS = ['iptables', 'iptables-save', 'iptables-restore'] as const;

/**
 * A directory whose iptables, iptables-save, iptables-restore (and ip6tables-…) are the given
 * backend's, put first in kube-proxy's PATH: kube-proxy runs plain `iptables`, and its image's
 * iptables-wrapper points those names at one backend the same way.
 */
export function iptablesBackendDir(dir: string, backend: 'legacy' | 'nft'): string {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  for (const family of ['', '6'])
    for (const command of IPTABLES_COMMANDS) {
      const name = command.replace('iptables', `ip${family}tables`);
      const target = name.replace(/^(ip6?tables)/, `$1-${backend}`);
      symlinkSync(`/usr/sbin/${target}`, join(dir, name));
    }
  return dir;
}

/** klog's text line: `I1201 23:40:00.1 123 file.go:9] "Message" key="value" key2=3`. */
export function parseKlogLine(text: string): Record<string, string> | null {
  const match = /^[IWEF]\d{4} [\d:.]+\s+\d+ [^\]]+\] "((?:[^"\\]|\\.)*)"(.*)$/.exec(text);
  if (!match) return null;
  const fields: Record<string, string> = { msg: match[1] as string };
  for (const kv of (match[2] as string).matchAll(/ ([A-Za-z][\w.]*)=(?:"((?:[^"\\]|\\.)*)"|(\S+))/g))
    fields[kv[1] as string] = kv[2] ?? (kv[3] as string);
  return fields;
}

/** A Go duration ("1.5s", "850.2ms", "12µs", "1m2.5s") in milliseconds; NaN when it is not one. */
export function goDurationMs(text: string): number {
  const units: Record<string, number> = { h: 3.6e6, m: 6e4, s: 1e3, ms: 1, us: 1e-3, µs: 1e-3, ns: 1e-6 };
  const parts = [...text.matchAll(/([\d.]+)(h|ms|m|s|us|µs|ns)/g)];
  if (parts.length === 0 || parts.map((p) => p[0]).join('') !== text) return Number.NaN;
  return parts.reduce((sum, p) => sum + Number(p[1]) * (units[p[2] as string] as number), 0);
}

/**
 * The klog level at which each mode logs its syncs: the iptables and nftables proxiers log "Syncing
 * … rules" and "SyncProxyRules complete" at 2; the ipvs proxier "Syncing ipvs proxier rules" at 3
 * and "syncProxyRules complete" at 4 (pkg/proxy/ipvs/proxier.go, v1.37), with a few more lines at
 * 4 than the other modes log at 2 (one per Service and slice event, one per address bound on the
 * first sync).
 */
export const SYNC_LOG_LEVEL: Record<RuleMode, number> = { iptables: 2, nftables: 2, ipvs: 4 };

/**
 * kube-proxy's log read as our agent's: each "SyncProxyRules complete" (ipvs: "syncProxyRules
 * complete") of the `family` proxier (IPv4 unless told) is a sync (its `elapsed` the duration),
 * full when the "Syncing … rules" line before it said fullSync=true; the ipvs proxier has no
 * partial syncs. The other family's proxier's syncs are left out: the Services measured are of one.
 */
export function kubeProxyLineReader(family: IPFamily = 'IPv4'): (text: string) => LogLineReading {
  let full = false;
  return (text) => {
    const line = parseKlogLine(text);
    if (!line || (line.ipFamily ?? 'IPv4') !== family) return line ? { line } : {};
    if (/^Syncing (iptables|nftables) rules$/.test(line.msg as string)) full = line.fullSync === 'true';
    if (line.msg === 'Syncing ipvs proxier rules') full = true;
    if (line.msg !== 'SyncProxyRules complete' && line.msg !== 'syncProxyRules complete') return { line };
    return { line, sync: { durationMs: goDurationMs(line.elapsed ?? ''), full } };
  };
}

export interface KubeProxyStart {
  lab: Lab;
  ns: string;
  binary: string;
  configPath: string;
  /** The mode its config names: it sets the log level its syncs are read at. */
  mode: RuleMode;
  /** iptables and ipvs modes: the directory of iptablesBackendDir(), first in its PATH. */
  iptablesDir?: string;
  /** Whose proxier's syncs are read (kubeProxyLineReader); IPv4 unless told. */
  family?: IPFamily;
}

/** The real kube-proxy, followed through its log like LabAgent follows ours. */
export class KubeProxyProcess {
  readonly log: AgentLog;

  private constructor(
    private readonly child: ChildProcess,
    readonly startedAt: number,
    family: IPFamily,
  ) {
    this.log = new AgentLog('kube-proxy', kubeProxyLineReader(family));
    child.stderr?.on('data', (d: Buffer) => this.log.feed(d));
    child.stdout?.on('data', () => {});
    child.once('close', (code) => this.log.end(code));
  }

  static start(o: KubeProxyStart): KubeProxyProcess {
    const startedAt = performance.now();
    const path = [o.iptablesDir, process.env.PATH].filter(Boolean).join(':');
    // `env` execs, so the pid is kube-proxy's.
    const child = o.lab.spawn(o.ns, 'env', [
      `PATH=${path}`,
      o.binary,
      `--config=${o.configPath}`,
      `--v=${SYNC_LOG_LEVEL[o.mode]}`,
    ]);
    return new KubeProxyProcess(child, startedAt, o.family ?? 'IPv4');
  }

  get syncs() {
    return this.log.syncs;
  }

  get lines() {
    return this.log.lines;
  }

  waitForSync(count: number, timeoutMs: number) {
    return this.log.waitForSync(count, timeoutMs);
  }

  /** Its "… sync params" line: the periods it really runs with. */
  syncParams(): Record<string, unknown> | undefined {
    return this.lines.find((l) => /sync params$/.test(String(l.msg)));
  }

  memory(): { rssMiB: number; peakMiB: number } {
    return processMemory(this.child.pid);
  }

  tail(): string {
    return this.log.tail();
  }

  /** SIGTERM; its rules stay in the kernel for the caller to clean up. */
  stop(): Promise<void> {
    return stopAgentProcess(this.child, this.log);
  }
}
