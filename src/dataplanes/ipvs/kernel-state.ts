// Reading the kernel's IPVS and ipset state back from the tools' own output, and the pure diff
// from it to the desired state (what the applier then writes in one batch per tool).

import type { IPFamily } from '../../model/types.js';
import { cidrContains, parseCIDR, parseIP } from '../../net/ip.js';
import {
  type IpsetContent,
  ipsetCreateLine,
  ipvsadmRealServerLine,
  ipvsadmService,
  ipvsadmServiceLine,
  type VirtualServer,
} from './plan.js';

export interface AppliedVirtualServer {
  /** ipvsadm's service argument, e.g. "-t 10.96.0.10:80": the identity of a virtual server. */
  service: string;
  /** The whole `-A …` line as ipvsadm -Sn prints it. */
  line: string;
  address: string;
  /** Real server "ip:port" ([ip]:port for IPv6) → weight. */
  realServers: Map<string, number>;
}

/** Parses `ipvsadm -Sn`. */
export function parseIpvsadmSave(text: string): Map<string, AppliedVirtualServer> {
  const services = new Map<string, AppliedVirtualServer>();
  for (const line of text.split('\n')) {
    const tokens = line.trim().split(/\s+/);
    if (tokens.length < 3) continue;
    const service = `${tokens[1]} ${tokens[2]}`;
    if (tokens[0] === '-A') {
      const hostPort = tokens[2] as string;
      const address = hostPort.slice(0, hostPort.lastIndexOf(':')).replace(/^\[|\]$/g, '');
      services.set(service, { service, line: line.trim(), address, realServers: new Map() });
    } else if (tokens[0] === '-a') {
      const rIndex = tokens.indexOf('-r');
      const wIndex = tokens.indexOf('-w');
      const rs = tokens[rIndex + 1];
      if (rIndex < 0 || rs === undefined) continue;
      services.get(service)?.realServers.set(rs, wIndex < 0 ? 1 : Number(tokens[wIndex + 1]));
    }
  }
  return services;
}

const LIST_PROTOCOL: Record<string, string> = { TCP: '-t', UDP: '-u', SCTP: '--sctp-service' };

/** Connections per real server from `ipvsadm -Ln`: "<service>/<ip:port>" → active + inactive. */
export function parseConnectionCounts(text: string): Map<string, number> {
  const counts = new Map<string, number>();
  let service: string | null = null;
  for (const line of text.split('\n')) {
    const tokens = line.trim().split(/\s+/);
    const flag = LIST_PROTOCOL[tokens[0] ?? ''];
    if (flag && tokens[1]) {
      service = `${flag} ${tokens[1]}`;
    } else if (tokens[0] === '->' && service && tokens.length >= 6 && /^\d+$/.test(tokens[4] ?? '')) {
      counts.set(`${service}/${tokens[1]}`, Number(tokens[4]) + Number(tokens[5]));
    } else if (tokens[0] === 'FWM') {
      service = null;
    }
  }
  return counts;
}

/** Members per set from `ipset save` (create lines name the sets, add lines hold the members). */
export function parseIpsetSave(text: string): Map<string, Set<string>> {
  const sets = new Map<string, Set<string>>();
  for (const line of text.split('\n')) {
    const [verb, name, entry] = line.trim().split(/\s+/);
    if (verb === 'create' && name) sets.set(name, new Set());
    else if (verb === 'add' && name && entry) sets.get(name)?.add(entry);
  }
  return sets;
}

/** `ipset restore` input: create missing sets, add missing members, delete stale ones. */
export function ipsetRestoreInput(desired: IpsetContent[], applied: Map<string, Set<string>>): string {
  const lines: string[] = [];
  for (const set of desired) {
    const current = applied.get(set.name);
    if (!current) lines.push(`${ipsetCreateLine(set)} -exist`);
    const wanted = new Set(set.entries);
    for (const entry of current ?? []) if (!wanted.has(entry)) lines.push(`del ${set.name} ${entry} -exist`);
    for (const entry of set.entries) if (!current?.has(entry)) lines.push(`add ${set.name} ${entry} -exist`);
  }
  return lines.length > 0 ? `${lines.join('\n')}\n` : '';
}

/** A real server leaving its virtual server. */
export interface RemovedRealServer {
  /** ipvsadm's service argument of the virtual server. */
  service: string;
  /** "ip:port" ([ip]:port for IPv6). */
  realServer: string;
  /** TCP drains; UDP and SCTP go at once (IsRsGracefulTerminationNeeded). */
  graceful: boolean;
}

export interface IpvsDiff {
  /** ipvsadm -R lines: -A/-E virtual servers, -a/-e real servers, -D stale virtual servers. */
  commands: string[];
  /** Real servers no longer wanted and not yet draining: the graceful termination decides. */
  removed: RemovedRealServer[];
  /** Draining real servers that are wanted again (set back to weight 1 by `commands`). */
  revived: string[];
}

const familyOf = (address: string): IPFamily => (address.includes(':') ? 'IPv6' : 'IPv4');

/**
 * From the kernel's virtual servers to the desired ones, as syncService/syncEndpoint and
 * cleanLegacyService do: virtual servers of another family, or inside excludeCIDRs, are not ours.
 */
export function diffVirtualServers(
  desired: VirtualServer[],
  applied: Map<string, AppliedVirtualServer>,
  opts: { family: IPFamily; excludeCIDRs: string[]; draining: ReadonlySet<string> },
): IpvsDiff {
  const commands: string[] = [];
  const removed: RemovedRealServer[] = [];
  const revived: string[] = [];
  const wanted = new Set<string>();
  for (const vs of desired) {
    const service = ipvsadmService(vs);
    wanted.add(service);
    const current = applied.get(service);
    const line = ipvsadmServiceLine(vs);
    if (!current) commands.push(line);
    else if (current.line !== line) commands.push(`-E${line.slice(2)}`);
    const wantedRealServers = new Set<string>();
    for (const rs of vs.realServers) {
      const rsLine = ipvsadmRealServerLine(vs, rs);
      const key = rsLine.split(' -r ')[1]?.split(' ')[0] as string;
      wantedRealServers.add(key);
      const weight = current?.realServers.get(key);
      if (weight === undefined) commands.push(rsLine);
      else if (weight !== rs.weight) {
        commands.push(`-e${rsLine.slice(2)}`);
        if (opts.draining.has(`${service}/${key}`)) revived.push(`${service}/${key}`);
      }
    }
    for (const key of current?.realServers.keys() ?? []) {
      if (wantedRealServers.has(key) || opts.draining.has(`${service}/${key}`)) continue;
      removed.push({ service, realServer: key, graceful: vs.protocol === 'TCP' });
    }
  }
  const excluded = opts.excludeCIDRs.map(parseCIDR).filter((cidr) => cidr !== null);
  for (const [service, vs] of applied) {
    if (wanted.has(service) || familyOf(vs.address) !== opts.family) continue;
    const ip = parseIP(vs.address);
    if (ip && excluded.some((cidr) => cidrContains(cidr, ip))) continue;
    commands.push(`-D ${service}`);
  }
  return { commands, removed, revived };
}
