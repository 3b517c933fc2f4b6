// The netfilter conntrack sysctls the real kube-proxy v1.37.2 leaves in its network namespace, and
// those our agent leaves in another, from the same KubeProxyConfiguration, each started against the
// real API server (src/lab/control-plane.ts) until its first sync. Shared by the iptables and
// nftables e2e tests.
//
// Nothing outside the lab changes: the settings are chosen from what the host holds so that
// neither writes nf_conntrack_max or the hashsize (one for the whole host; nf_conntrack_max is
// read-only in a namespace), and both are read back before and after.

import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect, it } from 'vitest';
import { mainScript } from '../../src/cli/demo.js';
import { CONNTRACK_SYSCTLS, HASHSIZE_PATH, sysctlPath } from '../../src/host/conntrack-sysctls.js';
import { LabAgent } from '../../src/lab/agent.js';
import { ControlPlane } from '../../src/lab/control-plane.js';
import { createNode } from '../../src/lab/kube-objects.js';
import { KubeProxyProcess, kubeProxyConfig, type RuleMode } from '../../src/lab/kube-proxy.js';
import { Lab } from '../../src/lab/netns.js';
import { describeControlPlane } from './control-plane.js';
import { inNetns } from './in-netns.js';

const readInt = (path: string) => Number(readFileSync(path, 'utf8').trim());

/** Every conntrack sysctl as this thread sees it (nf_conntrack_max: the host's, read-only in a namespace). */
export function conntrackSysctls(): Record<string, number> {
  return Object.fromEntries(CONNTRACK_SYSCTLS.map((name) => [name, readInt(sysctlPath(name))]));
}

export function hostHashsize(): number {
  return readInt(HASHSIZE_PATH);
}

/** A `conntrack:` section that sets every per-namespace sysctl and asks for no host-wide write. */
export function conntrackCase(): string[] {
  const min = Math.min(readInt(sysctlPath('nf_conntrack_max')), hostHashsize() * 4);
  return [
    'maxPerCore: 1',
    `min: ${min}`,
    'tcpEstablishedTimeout: 7h',
    'tcpCloseWaitTimeout: 90s',
    'tcpBeLiberal: true',
    'udpTimeout: 45s',
    'udpStreamTimeout: 100s',
  ];
}

export interface SysctlsOfBoth {
  kubeProxy: Record<string, number>;
  ours: Record<string, number>;
  hostBefore: { sysctls: Record<string, number>; hashsize: number };
  hostAfter: { sysctls: Record<string, number>; hashsize: number };
}

/** A node namespace linked to the API server, and the configuration file both proxies read there. */
async function nodeConfig(
  lab: Lab,
  cp: ControlPlane,
  mode: RuleMode,
  ns: string,
  index: number,
): Promise<string> {
  await lab.addNamespace(ns);
  const server = await cp.linkNamespace(ns, index);
  const kubeconfig = join(cp.workDir, `${ns}.kubeconfig`);
  writeFileSync(kubeconfig, cp.kubeconfig(cp.adminToken, server));
  const configPath = join(cp.workDir, `${ns}.conf`);
  const text = kubeProxyConfig({
    mode,
    hostname: 'node-a',
    clusterCIDR: '10.244.0.0/16',
    kubeconfig,
    contentType: 'application/json',
    conntrack: conntrackCase(),
  });
  writeFileSync(configPath, text);
  return configPath;
}

/** Starts both against one API server, reads their namespaces' sysctls after the first sync, cleans up. */
export async function conntrackSysctlsOfBoth(mode: RuleMode, prefix: string): Promise<SysctlsOfBoth> {
  const lab = new Lab(prefix);
  let cp: ControlPlane | undefined;
  const stops: (() => Promise<void>)[] = [];
  const hostBefore = { sysctls: conntrackSysctls(), hashsize: hostHashsize() };
  try {
    cp = await ControlPlane.start(lab);
    await createNode(cp, { name: 'node-a', ip: '10.10.0.1', podCIDR: '10.244.1.0/24' });
    const configFor = (ns: string, index: number) => nodeConfig(lab, cp as ControlPlane, mode, ns, index);
    const binary = join(cp.binaries.k8s, 'kube-proxy');
    const kubeProxy = KubeProxyProcess.start({
      lab,
      ns: 'kp',
      binary,
      configPath: await configFor('kp', 1),
      mode,
    });
    stops.push(() => kubeProxy.stop());
    await kubeProxy.waitForSync(1, 90_000);
    const agent = LabAgent.start(lab, 'us', mainScript, ['--config', await configFor('us', 2)]);
    stops.push(() => agent.stop());
    await agent.waitForSync(1, 90_000);
    return {
      kubeProxy: inNetns(lab.ns('kp'), conntrackSysctls),
      ours: inNetns(lab.ns('us'), conntrackSysctls),
      hostBefore,
      hostAfter: { sysctls: conntrackSysctls(), hashsize: hostHashsize() },
    };
  } finally {
    for (const stop of stops) await stop().catch(() => {});
    await cp?.stop();
    await lab.destroy();
  }
}

/** The e2e check of a rule mode: the sysctls ours leaves equal kube-proxy's, the host's untouched. */
export function describeConntrackSysctlsLikeKubeProxy(mode: RuleMode, prefix: string): void {
  describeControlPlane(
    'conntrack sysctls: the same as kube-proxy v1.37.2 sets from the same configuration',
    () => {
      it('every conntrack sysctl, after each one’s first sync', async () => {
        const both = await conntrackSysctlsOfBoth(mode, prefix);
        expect(both.ours).toEqual(both.kubeProxy);
        expect(both.kubeProxy).toMatchObject({
          nf_conntrack_tcp_timeout_established: 25200,
          nf_conntrack_tcp_timeout_close_wait: 90,
          nf_conntrack_tcp_be_liberal: 1,
          nf_conntrack_udp_timeout: 45,
          nf_conntrack_udp_timeout_stream: 100,
        });
        // Host-wide ones untouched, and the host's own namespace too.
        expect(both.hostAfter).toEqual(both.hostBefore);
      }, 300_000);
    },
  );
}
