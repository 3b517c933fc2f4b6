// The Service proxy under test on the real cluster, installed as its users install it:
//   - kube-bpf-proxy (modes bpf, iptables, nftables): `helm install` of charts/kube-bpf-proxy with
//     the values a user must give (the API server's address, the mode, the image they built and
//     imported, the cluster CIDRs), its DaemonSet pods run by the kubelets;
//   - the real kube-proxy v1.37.2 (modes kube-proxy-iptables, kube-proxy-nftables), the control:
//     one process per node, inside the node's namespaces, with kube-proxy's defaults but for the
//     conntrack sysctls it is told to leave alone (src/lab/kube-proxy.ts). A process and not
//     kubeadm's DaemonSet, because that needs a kube-proxy image, which nothing here builds; the
//     node, the rules and the API it reads are the same either way.

import { type ChildProcess, execFileSync } from 'node:child_process';
import { createWriteStream, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { CHART, helm } from '../helm.js';
import { kubeProxyConfig } from '../kube-proxy.js';
import { until } from '../until.js';
import { API_SERVER_IP, type RealCluster } from './cluster.js';

export const PROXY_MODES = [
  'bpf',
  'iptables',
  'nftables',
  'kube-proxy-iptables',
  'kube-proxy-nftables',
] as const;
export type ProxyMode = (typeof PROXY_MODES)[number];

/** The name and tag an OCI archive's index gives its image (io.containerd.image.name). */
export function archiveImageName(archive: string): { repository: string; tag: string } {
  const index = JSON.parse(execFileSync('tar', ['-xOf', archive, 'index.json'], { encoding: 'utf8' })) as {
    manifests: { annotations?: Record<string, string> }[];
  };
  const name = index.manifests[0]?.annotations?.['io.containerd.image.name'];
  const match = name ? /^(.+):([^:/]+)$/.exec(name) : null;
  if (!match) throw new Error(`${archive}: its index names no image (io.containerd.image.name)`);
  return { repository: match[1] as string, tag: match[2] as string };
}

/**
 * helm's --set values for the agent in a mode: only what the chart asks a user for. clusterCIDRs is
 * kube-proxy's comma-separated list; --set splits at commas, `\,` keeps one in the value.
 */
export function chartValues(
  mode: 'bpf' | 'iptables' | 'nftables',
  image: { repository: string; tag: string },
  clusterCIDRs: string,
): string[] {
  return [
    `k8sServiceHost=${API_SERVER_IP}`,
    `proxyMode=${mode}`,
    `image.repository=${image.repository}`,
    `image.tag=${image.tag}`,
    `config.clusterCIDR=${clusterCIDRs.replaceAll(',', '\\,')}`,
  ];
}

/** `helm install` of the chart into kube-system; returns once every agent is Ready (helm --wait). */
export async function installAgent(
  cluster: RealCluster,
  mode: 'bpf' | 'iptables' | 'nftables',
  agentArchive: string,
): Promise<void> {
  const args = [
    'install',
    'kbp',
    CHART,
    '--namespace',
    'kube-system',
    '--kubeconfig',
    cluster.adminKubeconfig('host'),
  ];
  for (const value of chartValues(mode, archiveImageName(agentArchive), cluster.clusterCIDRs))
    args.push('--set', value);
  args.push('--wait', '--timeout', '4m');
  await helm(join(cluster.stateDir, 'helm'), args);
}

/**
 * kube-proxy on every node, in the mode given; resolves once each has synced its rules once. Its
 * log goes to the node's log directory; the processes end with their nodes.
 */
export async function startKubeProxies(cluster: RealCluster, mode: 'iptables' | 'nftables'): Promise<void> {
  const cp = cluster.controlPlane;
  const kubeconfig = join(cluster.stateDir, 'kube-proxy.kubeconfig');
  writeFileSync(kubeconfig, cp.kubeconfig(cluster.kubeProxyToken, cp.nodeUrl));
  const binary = join(cluster.parts.controlPlane.k8s, 'kube-proxy');
  await Promise.all(
    cluster.nodes.map(async (node) => {
      const config = join(node.spec.stateDir, 'kube-proxy.yaml');
      writeFileSync(
        config,
        kubeProxyConfig({ mode, hostname: node.spec.name, clusterCIDR: cluster.clusterCIDRs, kubeconfig }),
      );
      const child = node.spawn(binary, [`--config=${config}`, '--v=2']);
      await firstSync(child, join(node.logDir, 'kube-proxy.log'));
    }),
  );
}

/** Logs the process to a file and waits for its first "SyncProxyRules complete" (klog, level 2). */
async function firstSync(child: ChildProcess, logFile: string): Promise<void> {
  const log = createWriteStream(logFile);
  let synced = false;
  let text = '';
  child.stdout?.pipe(log);
  child.stderr?.on('data', (d: Buffer) => {
    log.write(d);
    text = (text + d.toString()).slice(-4096);
    if (text.includes('SyncProxyRules complete')) synced = true;
  });
  await until(
    'kube-proxy synced its rules',
    () => {
      if (child.exitCode !== null) throw new Error(`kube-proxy exited (${child.exitCode}):\n${text}`);
      return synced;
    },
    60_000,
  );
}

/** The proxy of a mode: the agent from the chart (with the archive of its image), or kube-proxy. */
export async function installProxy(
  cluster: RealCluster,
  mode: ProxyMode,
  agentArchive?: string,
): Promise<void> {
  if (mode === 'kube-proxy-iptables' || mode === 'kube-proxy-nftables')
    await startKubeProxies(cluster, mode === 'kube-proxy-iptables' ? 'iptables' : 'nftables');
  else if (agentArchive) await installAgent(cluster, mode, agentArchive);
  else throw new Error(`mode ${mode} needs the agent image's archive`);
}
