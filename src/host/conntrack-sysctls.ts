// The netfilter conntrack sysctls of `conntrack.*`, set at start-up the way kube-proxy v1.37.2 sets
// them (kube-proxy's pkg/proxy/conntrack/sysctls.go, called from cmd/kube-proxy/app/server_linux.go):
//
// - nf_conntrack_max = maxPerCore × online CPUs, capped at 1,048,576, raised to `min` when below
//   it; maxPerCore 0 leaves it (and the hashsize) alone. It is written only when the current value
//   is lower: nf_conntrack_max is one for the whole host and read-only outside the initial network
//   namespace, so an agent in a pod network namespace whose host already allows enough flows
//   writes nothing.
// - The conntrack module's hashsize is raised to nf_conntrack_max / 4 when it is smaller (the
//   kernel refuses this write outside the initial network namespace).
// - The timeouts (non-zero ones) and tcp_be_liberal (when true) are written when they differ.
//   They are per network namespace.
// - Any failure stops the start with "could not set conntrack parameters from kube-proxy
//   configuration: …", as kube-proxy's does.
//
// planConntrackSysctls decides (pure); applyConntrackSysctls reads the host, writes, and logs
// kube-proxy's lines ("Set sysctl", "Setting conntrack hashsize").

import { readFileSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import type { Logger } from '../logger.js';

/** The `conntrack:` section of the configuration, durations in seconds (ProxyConfig['conntrack']). */
export interface ConntrackSettings {
  maxPerCore: number;
  min: number;
  tcpEstablishedTimeoutSeconds: number;
  tcpCloseWaitTimeoutSeconds: number;
  tcpBeLiberal: boolean;
  udpTimeoutSeconds: number;
  udpStreamTimeoutSeconds: number;
}

/** kube-proxy's cap on the scaled maximum, so hosts with many cores do not reserve huge tables. */
export const CONNTRACK_MAX_LIMIT = 1048576;
export const HASHSIZE_PATH = '/sys/module/nf_conntrack/parameters/hashsize';
export const ONLINE_CPUS_PATH = '/sys/devices/system/cpu/online';

export const CONNTRACK_SYSCTLS = [
  'nf_conntrack_max',
  'nf_conntrack_tcp_timeout_established',
  'nf_conntrack_tcp_timeout_close_wait',
  'nf_conntrack_tcp_be_liberal',
  'nf_conntrack_udp_timeout',
  'nf_conntrack_udp_timeout_stream',
] as const;
export type ConntrackSysctl = (typeof CONNTRACK_SYSCTLS)[number];

/** The host as the plan sees it; null where a value could not be read. */
export interface ConntrackReadings {
  cpus: number;
  sysctls: Record<ConntrackSysctl, number | null>;
  hashsize: number | null;
}

export type ConntrackWrite =
  | { kind: 'sysctl'; name: ConntrackSysctl; value: number }
  | { kind: 'hashsize'; value: number };

/** The nf_conntrack_max kube-proxy wants, or 0 for "leave it alone". */
export function conntrackMax(settings: Pick<ConntrackSettings, 'maxPerCore' | 'min'>, cpus: number): number {
  if (settings.maxPerCore <= 0) return 0;
  const scaled = settings.maxPerCore * cpus;
  // The cap wins over `min`, as in kube-proxy.
  if (scaled > CONNTRACK_MAX_LIMIT) return CONNTRACK_MAX_LIMIT;
  return Math.max(scaled, settings.min);
}

/**
 * The writes, in kube-proxy's order, that make the host match the settings (pure). Throws when the
 * hashsize must be checked and could not be read (kube-proxy fails there too).
 */
export function planConntrackSysctls(settings: ConntrackSettings, host: ConntrackReadings): ConntrackWrite[] {
  const writes: ConntrackWrite[] = [];
  // kube-proxy reads a sysctl it cannot read as 0, so it writes it.
  const differs = (name: ConntrackSysctl, value: number) => (host.sysctls[name] ?? 0) !== value;
  const max = conntrackMax(settings, host.cpus);
  if (max > 0) {
    const current = host.sysctls.nf_conntrack_max;
    if (current === null || current < max)
      writes.push({ kind: 'sysctl', name: 'nf_conntrack_max', value: max });
    if (host.hashsize === null) throw new Error(`cannot read ${HASHSIZE_PATH}`);
    const buckets = Math.trunc(max / 4);
    if (host.hashsize < buckets) writes.push({ kind: 'hashsize', value: buckets });
  }
  const wanted: [ConntrackSysctl, number][] = [
    ['nf_conntrack_tcp_timeout_established', settings.tcpEstablishedTimeoutSeconds],
    ['nf_conntrack_tcp_timeout_close_wait', settings.tcpCloseWaitTimeoutSeconds],
    ['nf_conntrack_tcp_be_liberal', settings.tcpBeLiberal ? 1 : 0],
    ['nf_conntrack_udp_timeout', settings.udpTimeoutSeconds],
    ['nf_conntrack_udp_timeout_stream', settings.udpStreamTimeoutSeconds],
  ];
  // Zero means "leave the kernel's value" for every one of them (tcpBeLiberal: false never writes 0).
  for (const [name, value] of wanted)
    if (value > 0 && differs(name, Math.trunc(value)))
      writes.push({ kind: 'sysctl', name, value: Math.trunc(value) });
  return writes;
}

/** The number of CPUs in a kernel CPU list such as "0-3,8,10-11"; throws on anything else. */
export function countCpuList(list: string): number {
  let count = 0;
  for (const part of list.trim().split(',')) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw new Error(`cannot read CPU list "${list.trim()}"`);
    const lo = Number(m[1]);
    const hi = m[2] === undefined ? lo : Number(m[2]);
    if (hi < lo) throw new Error(`cannot read CPU list "${list.trim()}"`);
    count += hi - lo + 1;
  }
  return count;
}

/** The node's online CPUs (not this process's cpuset, which a static CPU policy narrows), as kube-proxy counts them. */
export function onlineCpus(path = ONLINE_CPUS_PATH): number {
  try {
    return countCpuList(readFileSync(path, 'utf8'));
  } catch {
    return availableParallelism();
  }
}

export function sysctlPath(name: ConntrackSysctl): string {
  return `/proc/sys/net/netfilter/${name}`;
}

function readInt(path: string): number | null {
  try {
    const value = Number.parseInt(readFileSync(path, 'utf8').trim(), 10);
    return Number.isNaN(value) ? null : value;
  } catch {
    return null;
  }
}

/** What the plan needs from this network namespace and host. */
export function readConntrackHost(): ConntrackReadings {
  const sysctls = Object.fromEntries(CONNTRACK_SYSCTLS.map((name) => [name, readInt(sysctlPath(name))]));
  return {
    cpus: onlineCpus(),
    sysctls: sysctls as Record<ConntrackSysctl, number | null>,
    hashsize: readInt(HASHSIZE_PATH),
  };
}

/** Whether netfilter conntrack exists in this kernel (built in, or its module loaded). */
export function netfilterConntrackPresent(): boolean {
  return readInt(sysctlPath('nf_conntrack_max')) !== null;
}

/** Writes what the plan says, logging each write as kube-proxy does; throws kube-proxy's error. */
export function applyConntrackSysctls(settings: ConntrackSettings, log: Logger): ConntrackWrite[] {
  try {
    const writes = planConntrackSysctls(settings, readConntrackHost());
    for (const write of writes) {
      if (write.kind === 'hashsize') {
        log.info({ conntrackHashsize: write.value }, 'Setting conntrack hashsize');
        writeFileSync(HASHSIZE_PATH, String(write.value));
      } else {
        log.info({ entry: `net/netfilter/${write.name}`, value: write.value }, 'Set sysctl');
        writeFileSync(sysctlPath(write.name), String(write.value));
      }
    }
    return writes;
  } catch (err) {
    throw new Error(
      `could not set conntrack parameters from kube-proxy configuration: ${(err as Error).message}`,
    );
  }
}
