// Host facts (NodeEnv): probed from this machine for `run`, or read from a `--node-env` file so
// `render` can show what another node would get. The file holds exactly what `ip -j addr show`
// prints under "interfaces".

import { access, readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { z } from 'zod';
import type { NodeEnv } from '../brain/types.js';
import {
  type HostAddresses,
  interfaceSchema,
  interfacesFromIpJson,
  PROBED_HOST_ADDRESSES,
} from '../host/interfaces.js';
import type { IPFamily, Node } from '../model/types.js';

const nodeEnvSchema = z.strictObject({
  nodeName: z.string().min(1),
  nodeIPs: z.array(z.string()).default([]),
  interfaces: z.array(interfaceSchema).default([]),
  nodeLabels: z.record(z.string(), z.string()).default({}),
  iptables: z
    .strictObject({ randomFully: z.boolean(), nfacct: z.boolean() })
    .default({ randomFully: true, nfacct: false }),
  /** As a rule-mode agent on that node would decide them (see NodeEnv.proxyFamilies); unset: the node IPs' families. */
  proxyFamilies: z.array(z.enum(['IPv4', 'IPv6'])).optional(),
});

export function parseNodeEnv(text: string, fileName: string): NodeEnv {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new Error(`${fileName}: not valid JSON: ${(err as Error).message}`);
  }
  const parsed = nodeEnvSchema.safeParse(raw);
  if (!parsed.success) {
    const problems = parsed.error.issues.map(
      (issue) => `${issue.path.join('.') || '(root)'}: ${issue.message}`,
    );
    throw new Error(`${fileName}: invalid node environment:\n  ${problems.join('\n  ')}`);
  }
  return { ...parsed.data, interfaces: interfacesFromIpJson(parsed.data.interfaces) };
}

export async function readNodeEnvFile(path: string): Promise<NodeEnv> {
  return parseNodeEnv(await readFile(path, 'utf8'), path);
}

/** kube-proxy's node name: --hostname-override, else the lower-cased hostname. */
export function resolveNodeName(hostnameOverride: string): string {
  return (hostnameOverride.trim() || hostname()).toLowerCase();
}

/** Node IPs as kube-proxy takes them: the Node's InternalIPs, then ExternalIPs, else the default-route sources. */
export function nodeIPsFromNode(node: Node | null): string[] {
  const byType = (type: string) =>
    (node?.addresses ?? []).filter((a) => a.type === type).map((a) => a.address);
  return [...byType('InternalIP'), ...byType('ExternalIP')];
}

export async function probeNodeEnv(
  opts: {
    nodeName: string;
    node: Node | null;
    iptables: NodeEnv['iptables'];
    proxyFamilies?: IPFamily[];
  },
  addresses: HostAddresses = PROBED_HOST_ADDRESSES,
): Promise<NodeEnv> {
  const fromNode = nodeIPsFromNode(opts.node);
  return {
    nodeName: opts.nodeName,
    nodeIPs: fromNode.length > 0 ? fromNode : await addresses.defaultRouteIPs(),
    interfaces: await addresses.interfaces(),
    nodeLabels: opts.node?.meta.labels ?? {},
    iptables: opts.iptables,
    ...(opts.proxyFamilies ? { proxyFamilies: opts.proxyFamilies } : {}),
  };
}

/**
 * Whether this network namespace's kernel has IPv6, as kube-proxy's platformCheckSupported
 * decides it: /proc/net/if_inet6 exists and net.ipv6.conf.all.disable_ipv6 is not 1.
 */
export async function kernelHasIPv6(
  read: (path: string) => Promise<string> = (path) => readFile(path, 'utf8'),
  exists: (path: string) => Promise<boolean> = (path) =>
    access(path).then(
      () => true,
      () => false,
    ),
): Promise<boolean> {
  if (!(await exists('/proc/net/if_inet6'))) return false;
  const disabled = await read('/proc/sys/net/ipv6/conf/all/disable_ipv6').catch(() => '');
  return disabled.trim() !== '1';
}

/**
 * The families a rule mode runs, decided once at start as kube-proxy v1.37 does: IPv4, and IPv6
 * too whenever the kernel has it, node IPs or not (kube-proxy then uses ::1 as the IPv6 node IP).
 * Only the modes the differential test checks against kube-proxy (iptables, nftables); ipvs and
 * bpf keep deciding by the node IPs: undefined (bpf programs a family when the node has an IP of
 * it).
 */
export async function proxyFamiliesFor(
  mode: string,
  hasIPv6: () => Promise<boolean> = () => kernelHasIPv6(),
): Promise<IPFamily[] | undefined> {
  if (mode !== 'iptables' && mode !== 'nftables') return undefined;
  return (await hasIPv6()) ? ['IPv4', 'IPv6'] : ['IPv4'];
}
