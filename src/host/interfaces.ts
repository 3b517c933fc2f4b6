// The node's interfaces and addresses as `ip -j` prints them: probed for `run`, parsed from a
// file for `render --node-env`.

import { z } from 'zod';
import { runCommand } from './command.js';

export interface IpAddrInterface {
  ifname: string;
  flags?: string[];
  addr_info: { family: 'inet' | 'inet6'; local: string; prefixlen: number; scope?: string }[];
}

const addrInfoSchema = z
  .object({
    family: z.enum(['inet', 'inet6']),
    local: z.string(),
    prefixlen: z.number().int().min(0).max(128),
    scope: z.string().optional(),
  })
  .loose();

export const interfaceSchema = z
  .object({
    ifname: z.string(),
    flags: z.array(z.string()).optional(),
    addr_info: z.array(z.unknown()).default([]),
  })
  .loose();

/** `ip -j addr show` also lists link-level entries (family "link" etc.); only inet/inet6 matter. */
export function interfacesFromIpJson(raw: z.infer<typeof interfaceSchema>[]): IpAddrInterface[] {
  return raw.map((iface) => ({
    ifname: iface.ifname,
    ...(iface.flags ? { flags: iface.flags } : {}),
    addr_info: iface.addr_info.flatMap((info) => {
      const parsed = addrInfoSchema.safeParse(info);
      return parsed.success ? [parsed.data] : [];
    }),
  }));
}

/** What `ip -j addr show` prints, as NodeEnv's interfaces. */
export function parseIpAddrJson(stdout: string): IpAddrInterface[] {
  return interfacesFromIpJson(z.array(interfaceSchema).parse(JSON.parse(stdout)));
}

export async function probeInterfaces(): Promise<IpAddrInterface[]> {
  const { stdout } = await runCommand('ip', ['-j', 'addr', 'show']);
  return parseIpAddrJson(stdout);
}

/** The source addresses of the default routes, a fallback for node IPs when the Node object has none. */
export async function probeDefaultRouteIPs(): Promise<string[]> {
  const ips: string[] = [];
  for (const family of ['-4', '-6']) {
    try {
      const { stdout } = await runCommand('ip', [
        '-j',
        family,
        'route',
        'get',
        family === '-4' ? '192.0.2.1' : '2001:db8::1',
      ]);
      const [route] = JSON.parse(stdout) as { prefsrc?: string }[];
      if (route?.prefsrc) ips.push(route.prefsrc);
    } catch {
      // No route of this family: the node is single-stack.
    }
  }
  return ips;
}

/** The host facts a sync reads: the interfaces and the default routes' source addresses. */
export interface HostAddresses {
  interfaces(): Promise<IpAddrInterface[]>;
  defaultRouteIPs(): Promise<string[]>;
}

/** Probes on every call: `ip` runs each time. */
export const PROBED_HOST_ADDRESSES: HostAddresses = {
  interfaces: probeInterfaces,
  defaultRouteIPs: probeDefaultRouteIPs,
};

/**
 * The host's addresses, probed once and again only after netlink reported a link, address or
 * route change (`changed`, e.g. from a LinkWatch) or `maxAgeMs` later, so a sync does not spawn
 * `ip` three times (tens of milliseconds) to learn what has not changed. A probe that fails is
 * not kept.
 */
export class CachedHostAddresses implements HostAddresses {
  private probed: { interfaces?: Promise<IpAddrInterface[]>; defaultRouteIPs?: Promise<string[]> } = {};
  private probedAt = Number.NEGATIVE_INFINITY;

  constructor(
    private readonly probe: HostAddresses = PROBED_HOST_ADDRESSES,
    private readonly maxAgeMs = 60_000,
    private readonly now: () => number = Date.now,
  ) {}

  /** Forgets what was probed: the next call probes again. */
  changed(): void {
    this.probed = {};
  }

  interfaces(): Promise<IpAddrInterface[]> {
    return this.cached('interfaces');
  }

  defaultRouteIPs(): Promise<string[]> {
    return this.cached('defaultRouteIPs');
  }

  private cached<K extends keyof HostAddresses>(fact: K): ReturnType<HostAddresses[K]> {
    if (this.now() - this.probedAt >= this.maxAgeMs) this.changed();
    let pending = this.probed[fact];
    if (!pending) {
      if (Object.keys(this.probed).length === 0) this.probedAt = this.now();
      const probing = this.probe[fact]() as NonNullable<typeof pending>;
      const held = this.probed;
      // A failed probe is dropped (from this generation only) so the next sync tries again.
      probing.catch(() => {
        if (held[fact] === probing) delete held[fact];
      });
      held[fact] = probing as never;
      pending = probing;
    }
    return pending as ReturnType<HostAddresses[K]>;
  }
}
