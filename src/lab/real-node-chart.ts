// What the Helm chart renders for the real-node lab's agents (src/lab/real-node.ts): `helm
// template` with the chart's defaults, and of it the agent's config.conf, its container args, where
// the ConfigMap is mounted, the ConfigMap and the DaemonSet.

import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { ProxyMode } from '../config/types.js';
import { CHART, helm } from './helm.js';

export interface RenderedAgent {
  config: string;
  args: string[];
  /** Where the DaemonSet mounts the ConfigMap. */
  configMountPath: string;
  // biome-ignore lint/suspicious/noExplicitAny: rendered manifests are untyped YAML
  configMap: any;
  // biome-ignore lint/suspicious/noExplicitAny: rendered manifests are untyped YAML
  daemonSet: any;
}

/** `helm template` of the chart with its defaults (plus the required API server address and the mode). */
export async function renderChart(
  mode: ProxyMode,
  workDir: string,
  set: string[] = [],
): Promise<RenderedAgent> {
  const home = join(workDir, 'helm');
  const stdout = await helm(home, [
    'template',
    'kbp',
    CHART,
    '-n',
    'kube-system',
    '--set',
    'k8sServiceHost=10.10.0.1',
    '--set',
    `proxyMode=${mode}`,
    ...set.flatMap((value) => ['--set', value]),
  ]);

  // biome-ignore lint/suspicious/noExplicitAny: rendered manifests are untyped YAML
  const objects = parseAllDocuments(stdout).map((doc) => doc.toJS() as any);
  const configMap = objects.find((o) => o?.kind === 'ConfigMap' && o.data?.['config.conf']);
  const daemonSet = objects.find((o) => o?.kind === 'DaemonSet');
  const pod = daemonSet?.spec?.template?.spec;
  const container = pod?.containers?.find((c: { name: string }) => c.name === 'kube-bpf-proxy');
  const configVolume = pod?.volumes?.find(
    (v: { configMap?: { name: string } }) => v.configMap?.name === configMap?.metadata?.name,
  );
  const mount = container?.volumeMounts?.find((m: { name: string }) => m.name === configVolume?.name);
  if (!configMap || !container?.args || !mount)
    throw new Error('the chart rendered no agent ConfigMap or DaemonSet');
  return {
    config: configMap.data['config.conf'],
    args: container.args,
    configMountPath: mount.mountPath,
    configMap,
    daemonSet,
  };
}
