// Host facts (NodeEnv): probed from this machine for `run`, or read from a `--node-env` file so
// `render` can show what another node would get. The file holds exactly what `ip -j addr show`
// prints under "interfaces".

import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { promisify } from 'node:util';
import { z } from 'zod';
import type { Node } from '../model/types.js';
import type { IpAddrInterface, NodeEnv } from '../proxy/types.js';

const execFileAsync = promisify(execFile);

const addrInfoSchema = z
  .object({
    family: z.enum(['inet', 'inet6']),
    local: z.string(),
    prefixlen: z.number().int().min(0).max(128),
    scope: z.string().optional(),
  })
  .loose();

const interfaceSchema = z
  .object({
    ifname: z.string(),
    flags: z.array(z.string()).optional(),
    addr_info: z.array(z.unknown()).default([]),
  })
  .loose();

const nodeEnvSchema = z.strictObject({
  nodeName: z.string().min(1),
  nodeIPs: z.array(z.string()).default([]),
  interfaces: z.array(interfaceSchema).default([]),
  nodeLabels: z.record(z.string(), z.string()).default({}),
  iptables: z
    .strictObject({ randomFully: z.boolean(), nfacct: z.boolean() })
    .default({ randomFully: true, nfacct: false }),
});

/** `ip -j addr show` also lists link-level entries (family "link" etc.); only inet/inet6 matter. */
function interfacesFromIpJson(raw: z.infer<typeof interfaceSchema>[]): IpAddrInterface[] {
  return raw.map((iface) => ({
    ifname: iface.ifname,
    ...(iface.flags ? { flags: iface.flags } : {}),
    addr_info: iface.addr_info.flatMap((info) => {
      const parsed = addrInfoSchema.safeParse(info);
      return parsed.success ? [parsed.data] : [];
    }),
  }));
}

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

/** What `ip -j addr show` prints, as NodeEnv's interfaces. */
export function parseIpAddrJson(stdout: string): IpAddrInterface[] {
  return interfacesFromIpJson(z.array(interfaceSchema).parse(JSON.parse(stdout)));
}

export async function probeInterfaces(): Promise<IpAddrInterface[]> {
  const { stdout } = await execFileAsync('ip', ['-j', 'addr', 'show']);
  return parseIpAddrJson(stdout);
}

/** The source addresses of the default routes, a fallback for node IPs when the Node object has none. */
export async function probeDefaultRouteIPs(): Promise<string[]> {
  const ips: string[] = [];
  for (const family of ['-4', '-6']) {
    try {
      const { stdout } = await execFileAsync('ip', [
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

/** Node IPs as kube-proxy takes them: the Node's InternalIPs, then ExternalIPs, else the default-route sources. */
export function nodeIPsFromNode(node: Node | null): string[] {
  const byType = (type: string) =>
    (node?.addresses ?? []).filter((a) => a.type === type).map((a) => a.address);
  return [...byType('InternalIP'), ...byType('ExternalIP')];
}

export async function probeNodeEnv(opts: {
  nodeName: string;
  node: Node | null;
  iptables: NodeEnv['iptables'];
}): Promise<NodeEnv> {
  const fromNode = nodeIPsFromNode(opts.node);
  return {
    nodeName: opts.nodeName,
    nodeIPs: fromNode.length > 0 ? fromNode : await probeDefaultRouteIPs(),
    interfaces: await probeInterfaces(),
    nodeLabels: opts.node?.meta.labels ?? {},
    iptables: opts.iptables,
  };
}
