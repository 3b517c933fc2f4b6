// "Is this endpoint in the kernel yet?" for each mode, asked as narrowly as the mode allows, so a
// poll costs little even with 30,000 services programmed: one iptables chain, one nft chain, one
// scan of the BPF backends map, or one IPVS virtual server.

import { dumpMap } from '../native/libbpf/map.js';
import { getPinned } from '../native/libbpf/object.js';
import { closeFd } from '../native/libc.js';
import { backend4, backend6, u32Codec } from '../src/dataplanes/bpf/layout.js';
import { mapPinPath, PIN_LAYOUT_VERSION } from '../src/dataplanes/bpf/object.js';
import { endpointChain } from '../src/dataplanes/iptables/names.js';
import { servicePortChainNameBase } from '../src/dataplanes/nftables/names.js';
import type { Lab } from '../src/lab/netns.js';
import { canonicalIP, type IPFamily, joinHostPort } from '../src/net/ip.js';
import { NAMESPACE, SERVICE_TCP_PORT, TCP_TARGET_PORT } from './scenario.js';

/**
 * "direct": no Service and no proxy: the client connects to the backend pods' own addresses, the
 * physical limit every mode is measured against (data plane only).
 * "bpf-sock": the bpf mode with bpf.socketLB all, the client pod served at its sockets.
 * "kube-proxy-iptables", "kube-proxy-nftables", "kube-proxy-ipvs": the real kube-proxy binary in
 * that mode, the baseline our iptables, nftables and ipvs modes re-implement.
 */
export type BenchMode =
  | 'direct'
  | 'bpf'
  | 'bpf-sock'
  | 'iptables'
  | 'nftables'
  | 'ipvs'
  | 'kube-proxy-iptables'
  | 'kube-proxy-nftables'
  | 'kube-proxy-ipvs';

/** The real kube-proxy's modes, each next to the mode of ours that re-implements it. */
export const KUBE_PROXY_MODES = {
  'kube-proxy-iptables': 'iptables',
  'kube-proxy-nftables': 'nftables',
  'kube-proxy-ipvs': 'ipvs',
} as const satisfies Partial<Record<BenchMode, BenchMode>>;

export type KubeProxyMode = keyof typeof KUBE_PROXY_MODES;

export function isKubeProxyMode(mode: BenchMode): mode is KubeProxyMode {
  return mode in KUBE_PROXY_MODES;
}

/** What the kernel holds in this mode: the real kube-proxy programs the same rules as ours. */
export function kernelMode(mode: BenchMode): Exclude<BenchMode, KubeProxyMode> {
  return isKubeProxyMode(mode) ? KUBE_PROXY_MODES[mode] : mode;
}

export interface ProbeContext {
  lab: Lab;
  nodeNs: string;
  /** The bpf pin path the agent was given. */
  pinPath: string;
  /** The iptables binary family the proxy uses ("nft" or "legacy"). */
  iptablesBackend: string;
  /** The measured service's ClusterIP (ipvs lists real servers per virtual server). */
  serviceIP: string;
  /** The measured service's family: which table, nft family, BPF map the endpoint is in. */
  family: IPFamily;
}

/** True when the kernel already steers the measured service's http port to `ip` (of ctx.family). */
export async function endpointInKernel(
  mode: BenchMode,
  ctx: ProbeContext,
  service: string,
  ip: string,
): Promise<boolean> {
  switch (kernelMode(mode)) {
    case 'iptables': {
      const chain = endpointChain(`${NAMESPACE}/${service}:http`, 'TCP', joinHostPort(ip, TCP_TARGET_PORT));
      const cmd = `${ctx.family === 'IPv6' ? 'ip6tables' : 'iptables'}-${ctx.iptablesBackend === 'legacy' ? 'legacy' : 'nft'}`;
      const result = await ctx.lab.exec(ctx.nodeNs, cmd, ['-w', '-t', 'nat', '-S', chain], {
        allowFailure: true,
      });
      return result.code === 0;
    }
    case 'nftables': {
      // kube-proxy 1.37's layout DNATs in the service chain itself (a numgen map of ip . port).
      const base = servicePortChainNameBase({ namespace: NAMESPACE, name: service, portName: 'http' }, 'TCP');
      const result = await ctx.lab.exec(
        ctx.nodeNs,
        'nft',
        ['list', 'chain', ctx.family === 'IPv6' ? 'ip6' : 'ip', 'kube-proxy', `service-${base}`],
        { allowFailure: true },
      );
      return (
        result.code === 0 &&
        (result.stdout.includes(`${ip} . ${TCP_TARGET_PORT}`) ||
          result.stdout.includes(`${ip}:${TCP_TARGET_PORT}`))
      );
    }
    case 'bpf':
    case 'bpf-sock': {
      const [map, codec] =
        ctx.family === 'IPv6' ? (['backends6', backend6] as const) : (['backends4', backend4] as const);
      const fd = getPinned(mapPinPath(`${ctx.pinPath}/${PIN_LAYOUT_VERSION}`, map));
      try {
        const { values } = dumpMap(fd, u32Codec.size, codec.size);
        const wanted = canonicalIP(ip);
        return values.some((v) => canonicalIP(codec.decode(v).addr) === wanted);
      } finally {
        closeFd(fd);
      }
    }
    case 'direct':
      throw new Error('the direct mode runs no proxy: it has no endpoint to look for');
    case 'ipvs': {
      // The virtual server of the ClusterIP's http port, and its real servers.
      const result = await ctx.lab.exec(
        ctx.nodeNs,
        'ipvsadm',
        ['-Ln', '-t', joinHostPort(ctx.serviceIP, SERVICE_TCP_PORT)],
        {
          allowFailure: true,
        },
      );
      return result.code === 0 && result.stdout.includes(`-> ${joinHostPort(ip, TCP_TARGET_PORT)} `);
    }
  }
}
