// Host facts (NodeEnv): probed from this machine for `run`, or read from a `--node-env` file so
// `render` can show what another node would get. The file holds exactly what `ip -j addr show`
// prints under "interfaces".

import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import { z } from 'zod';
import type { NodeEnv } from '../brain/types.js';
import {
  interfaceSchema,
  interfacesFromIpJson,
  probeDefaultRouteIPs,
  probeInterfaces,
} from '../host/interfaces.js';
import type { Node } from '../model/types.js';

const nodeEnvSchema = z.strictObject({
  nodeName: z.string().min(1),
  nodeIPs: z.array(z.string()).default([]),
  interfaces: z.array(interfaceSchema).default([]),
  nodeLabels: z.record(z.string(), z.string()).default({}),
  iptables: z
    .strictObject({ randomFully: z.boolean(), nfacct: z.boolean() })
    .default({ randomFully: true, nfacct: false }),
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
