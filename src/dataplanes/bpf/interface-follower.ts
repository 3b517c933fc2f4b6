// Follows the node's interfaces through netlink (host/link-watch.ts): a new pod's veth is hooked,
// and a removed one released, within a debounce interval; the node's addresses the programs need
// (NodePort addresses, each device's SNAT source, host-routing devices) are refreshed on the same
// pass. Interfaces are found by discover.ts and attached by attach.ts.

import type { ProxyDecisions } from '../../brain/types.js';
import type { BpfConfig } from '../../config/types.js';
import { LinkWatch } from '../../host/link-watch.js';
import type { Logger } from '../../logger.js';
import type { IPFamily } from '../../model/types.js';
import { canonicalIP, isLoopback, parseIP } from '../../net/ip.js';
import { type Attacher, type AttachReport, plannedAttachments } from './attach.js';
import {
  type DiscoveredInterface,
  discoverInterfaces,
  type HostNetwork,
  type IpLink,
  probeHostNetwork,
} from './discover.js';
import { hostRouteInterfaces, readRemoteBypassNode, remoteBypass } from './host-route.js';
import type { KernelStore } from './kernel-store.js';
import { SerialQueue } from './serial-queue.js';

/** A burst of netlink events (a pod start adds a link, addresses and routes) becomes one pass. */
export const WATCH_DEBOUNCE_MS = 150;
/** The safety net under the netlink watch: interfaces and node addresses are re-read this often. */
export const INTERFACE_RESYNC_MS = 60_000;

type AddrInfo = NonNullable<IpLink['addr_info']>[number];

/** An IPv6 address the kernel may use as a source: not still in (or failed) duplicate address
 * detection. */
const usable6 = (a: AddrInfo) => !a.tentative && !a.dadfailed;

/**
 * Each interface's SNAT source by ifindex, per family, as MASQUERADE would pick it: its first
 * global IPv4 address; its first global IPv6 address that is usable (usable6), one not deprecated
 * before a deprecated one (RFC 6724 rule 3). Interfaces without one are absent.
 */
export function interfaceAddresses(
  interfaces: readonly Pick<IpLink, 'ifindex' | 'addr_info'>[],
): Record<IPFamily, Map<number, string>> {
  const out: Record<IPFamily, Map<number, string>> = { IPv4: new Map(), IPv6: new Map() };
  for (const i of interfaces) {
    const global = (i.addr_info ?? []).filter((a) => a.local && (a.scope ?? 'global') === 'global');
    const v4 = global.find((a) => a.family === 'inet');
    const v6 = global.filter((a) => a.family === 'inet6' && usable6(a));
    const pick6 = v6.find((a) => !a.deprecated) ?? v6[0];
    if (v4?.local) out.IPv4.set(i.ifindex, v4.local);
    const ip6 = pick6?.local ? canonicalIP(pick6.local) : null;
    if (ip6) out.IPv6.set(i.ifindex, ip6);
  }
  return out;
}

/** Every IPv4 address of the node except loopback, and every global IPv6 one (not ::1, not
 * link-local): NodePorts open on "every node address", as kube-proxy's nodePortAddresses default. */
export function nodeAddresses(interfaces: readonly Pick<IpLink, 'ifname' | 'addr_info'>[]): string[] {
  const out = new Set<string>();
  for (const i of interfaces) {
    for (const a of i.addr_info ?? []) {
      if (!a.local) continue;
      if (a.family === 'inet' && !a.local.startsWith('127.')) out.add(a.local);
      const ip = a.family === 'inet6' ? parseIP(a.local) : null;
      if (ip && !isLoopback(ip) && !(ip.bytes[0] === 0xfe && (ip.bytes[1]! & 0xc0) === 0x80))
        out.add(a.local);
    }
  }
  return [...out].sort();
}

export class InterfaceFollower {
  /** The node's IPs from the last sync's decisions: devices holding them are external. */
  private nodeIPs: string[] = [];
  private watch: LinkWatch | null = null;
  private refreshTimer: NodeJS.Timeout | null = null;
  private readonly queue = new SerialQueue();
  private closed = false;
  /** The last remoteBypass outcome logged, so that only a change is. */
  private remoteLogged = '';

  constructor(
    private readonly attacher: Attacher,
    /** Verifies the programs an interface needs that the start did not load (LoadedObject). */
    private readonly loadPrograms: (names: Iterable<string>) => Promise<string[]>,
    private readonly store: KernelStore,
    private readonly bpf: BpfConfig,
    /** Host routing loaded (hostRoutingDecision): the pods' devices go into kbp_hostif_v1. */
    private readonly hostRouting: boolean,
    private readonly log: Logger,
  ) {}

  /** Watching starts before the first pass: a device that appears during it is not missed. */
  startWatch(): void {
    this.watch = new LinkWatch(() => this.requestRefresh(), this.log);
    this.watch.start();
  }

  /** A device holding a node IP is external: new node IPs mean another discovery pass. */
  noteNodeIPs(decisions: ProxyDecisions): void {
    const ips = decisions.families.map((f) => f.nodeIP).filter((ip) => ip !== '');
    if (ips.join() === this.nodeIPs.join()) return;
    this.nodeIPs = ips;
    if (this.watch) this.requestRefresh();
  }

  /** A discovery pass soon, once a burst of events has settled. */
  requestRefresh(): void {
    if (this.closed || this.refreshTimer) return;
    this.refreshTimer = setTimeout(() => {
      this.refreshTimer = null;
      this.refresh().catch((err: unknown) =>
        this.log.error({ err }, 'interface discovery failed; retried at the next netlink event or resync'),
      );
    }, WATCH_DEBOUNCE_MS);
    this.refreshTimer.unref();
  }

  /** One discovery pass: attach to the interfaces found, release gone ones, refresh the node's addresses. */
  refresh(): Promise<AttachReport> {
    return this.queue.run(() => this.refreshOnce());
  }

  /** Stops following; resolves once a pass under way (which still uses the programs) is done. */
  async close(): Promise<void> {
    this.closed = true;
    this.watch?.close();
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    this.refreshTimer = null;
    await this.queue.idle();
  }

  private async refreshOnce(): Promise<AttachReport> {
    const host = await probeHostNetwork();
    if (this.closed) return { attached: [], replaced: [], detached: [], errors: [] };
    const interfaces = discoverInterfaces(host, this.nodeIPs, this.bpf);
    await this.loadProgramsFor(interfaces);
    const report = this.attacher.sync(interfaces);
    this.logReport(report, interfaces);
    this.store.setNodeAddresses(nodeAddresses(host.links));
    this.store.setInterfaceAddresses(interfaceAddresses(host.links));
    if (this.hostRouting) {
      await this.refreshHostRouting(host, interfaces);
    } else {
      // Pinned maps may hold a previous run's entries: empty unless host routing is on.
      this.store.setHostRouteInterfaces(new Map());
      this.store.setHostRouteDestinations({ IPv4: [], IPv6: [] });
    }
    return report;
  }

  /** Host routing's devices and remote destinations (kbp_hostif_v1, kbp_hostdst4/6_v1). */
  private async refreshHostRouting(
    host: HostNetwork,
    interfaces: readonly DiscoveredInterface[],
  ): Promise<void> {
    const podDevices = hostRouteInterfaces(host.links, interfaces);
    const remote = remoteBypass({
      ...(await readRemoteBypassNode()),
      links: host.links,
      interfaces,
      podDevices,
    });
    this.store.setHostRouteInterfaces(new Map([...podDevices, ...remote.devices]));
    this.store.setHostRouteDestinations(remote.prefixes);
    const outcome = { bypass: remote.prefixes, stack: remote.stack };
    if (JSON.stringify(outcome) === this.remoteLogged) return;
    this.remoteLogged = JSON.stringify(outcome);
    this.log.info(outcome, 'host routing to other nodes');
  }

  /** A program that fails to load is logged here; its attachments then fail in the attacher, which
   * reports them and retries at the next pass. */
  private async loadProgramsFor(interfaces: readonly DiscoveredInterface[]): Promise<void> {
    const programs = plannedAttachments(interfaces, this.bpf.xdpMode).map((a) => a.program);
    try {
      const loaded = await this.loadPrograms(programs);
      if (loaded.length > 0) this.log.info({ programs: loaded }, 'bpf programs loaded for new interfaces');
    } catch (err) {
      this.log.error({ err, programs }, 'loading bpf programs failed');
    }
  }

  private logReport(report: AttachReport, interfaces: readonly DiscoveredInterface[]): void {
    const role = (ifname: string) => {
      const i = interfaces.find((d) => d.ifname === ifname);
      return i ? { role: i.role, l3: i.l3, reason: i.reason } : {};
    };
    for (const [msg, links] of [
      ['bpf program attached', report.attached],
      ['bpf program swapped in', report.replaced],
    ] as const) {
      for (const a of links) {
        this.log.info(
          {
            interface: a.ifname,
            hook: a.hook,
            program: a.program,
            mechanism: a.mechanism,
            ...role(a.ifname),
          },
          msg,
        );
      }
    }
    for (const link of report.detached) this.log.info({ link }, 'bpf program detached');
    for (const e of report.errors) {
      this.log.warn(
        {
          interface: e.attachment.ifname,
          hook: e.attachment.hook,
          program: e.attachment.program,
          error: e.error,
        },
        'attach failed',
      );
    }
  }
}
