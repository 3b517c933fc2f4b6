// The agent run the way the kubelet runs the chart's DaemonSet pod, minus the container image: a
// process in a node's network namespace, in a private mount namespace that holds what the pod
// would see: the ConfigMap at the DaemonSet's mount path, the ServiceAccount token, ca.crt and
// namespace at /var/run/secrets/kubernetes.io/serviceaccount, the host's cgroup2 root read-only
// at /run/kube-bpf-proxy/cgroupv2, and no bpffs (the chart's init container mounts it on a node that
// lacks it; here the agent must do it itself). /etc and /run get a tmpfs-backed overlay, so the
// mount points are made without touching the host's own directories. The container's environment
// (NODE_NAME from the downward API, the DaemonSet's values) is set, and $(VAR) in args expanded, as
// the kubelet does.

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { stopAgentProcess } from '../../src/lab/agent.js';
import { AgentLog } from '../../src/lab/agent-log.js';
import type { Lab } from '../../src/lab/netns.js';
import type { K8sObject } from './helm.js';

const TOKEN_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

// sh -ec SCRIPT sh WORKDIR CONFIG_MOUNT CGROUP2_ROOT ENV... -- COMMAND...
const POD_MOUNTS = [
  'work=$1; config_mount=$2; cgroup2=$3; shift 3',
  'while mountpoint -q /sys/fs/bpf; do umount /sys/fs/bpf; done',
  'mount -t tmpfs hcp-pod "$work/mnt"',
  'for d in etc run; do mkdir -p "$work/mnt/$d/upper" "$work/mnt/$d/work"',
  '  mount -t overlay "hcp-$d" -o "lowerdir=/$d,upperdir=$work/mnt/$d/upper,workdir=$work/mnt/$d/work" "/$d"; done',
  'mkdir -p "$config_mount" /run/secrets/kubernetes.io/serviceaccount /run/kube-bpf-proxy/cgroupv2',
  'mount --bind "$work/config" "$config_mount"',
  'mount -o remount,bind,ro "$config_mount"',
  `mount --bind "$work/serviceaccount" ${TOKEN_DIR}`,
  `mount -o remount,bind,ro ${TOKEN_DIR}`,
  'mount --bind "$cgroup2" /run/kube-bpf-proxy/cgroupv2',
  'mount -o remount,bind,ro /run/kube-bpf-proxy/cgroupv2',
  'exec env "$@"',
].join('\n');

export interface PodAgentSpec {
  /** The DaemonSet as the API server stores it. */
  daemonSet: K8sObject;
  /** The ConfigMap its config volume names. */
  configMap: K8sObject;
  nodeName: string;
  token: string;
  caPem: string;
  cli: string;
  workDir: string;
}

export class PodAgent {
  readonly log = new AgentLog('chart agent');
  readonly args: string[];

  private constructor(
    private readonly child: import('node:child_process').ChildProcess,
    args: string[],
  ) {
    this.args = args;
    child.stderr?.on('data', (d: Buffer) => this.log.feed(d));
    child.stdout?.on('data', (d: Buffer) => this.log.feed(d));
    child.once('close', (code) => this.log.end(code));
  }

  get lines(): Record<string, unknown>[] {
    return this.log.lines;
  }

  /** Starts the agent container's command in `ns` as the kubelet would for `spec.nodeName`. */
  static start(lab: Lab, ns: string, spec: PodAgentSpec): PodAgent {
    const pod = spec.daemonSet.spec.template.spec;
    const container = pod.containers.find((c: { name: string }) => c.name === 'kube-bpf-proxy');
    const configVolume = pod.volumes.find(
      (v: { configMap?: { name: string } }) => v.configMap?.name === spec.configMap.metadata.name,
    );
    const mount = container?.volumeMounts?.find((m: { name: string }) => m.name === configVolume?.name);
    if (!container || !mount) throw new Error('the DaemonSet has no agent container with the config volume');

    // The container's environment: literal values and the downward API's spec.nodeName.
    const env: Record<string, string> = {};
    for (const e of container.env ?? []) {
      if (typeof e.value === 'string') env[e.name] = e.value;
      else if (e.valueFrom?.fieldRef?.fieldPath === 'spec.nodeName') env[e.name] = spec.nodeName;
      else throw new Error(`the harness cannot provide env ${e.name}: ${JSON.stringify(e.valueFrom)}`);
    }
    const expand = (arg: string) =>
      arg.replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (all, name) => env[name] ?? all);
    const args: string[] = [...(container.command ?? []), ...(container.args ?? [])].map(expand);

    mkdirSync(join(spec.workDir, 'mnt'), { recursive: true });
    mkdirSync(join(spec.workDir, 'config'), { recursive: true });
    mkdirSync(join(spec.workDir, 'serviceaccount'), { recursive: true });
    for (const [key, value] of Object.entries(spec.configMap.data ?? {})) {
      writeFileSync(join(spec.workDir, 'config', key), String(value));
    }
    writeFileSync(join(spec.workDir, 'serviceaccount', 'token'), spec.token);
    writeFileSync(join(spec.workDir, 'serviceaccount', 'ca.crt'), spec.caPem);
    writeFileSync(join(spec.workDir, 'serviceaccount', 'namespace'), spec.daemonSet.metadata.namespace ?? '');

    // The image's entrypoint is the CLI: the container's args follow it.
    const child = lab.spawn(ns, 'unshare', [
      '--mount',
      '--propagation',
      'private',
      '--',
      'sh',
      '-ec',
      POD_MOUNTS,
      'sh',
      spec.workDir,
      mount.mountPath,
      ownCgroupOf(lab, ns),
      ...Object.entries(env).map(([k, v]) => `${k}=${v}`),
      process.execPath,
      spec.cli,
      ...args,
    ]);
    return new PodAgent(child, args);
  }

  /** Resolves when a log line matches; rejects when the agent exits or the time runs out. */
  async waitForLine(match: (line: Record<string, unknown>) => boolean, timeoutMs: number): Promise<void> {
    await this.log.waitForLine(match, timeoutMs);
  }

  tail(): string {
    return this.log.tail();
  }

  stop(): Promise<void> {
    return stopAgentProcess(this.child, this.log);
  }
}

/**
 * The lab's cgroup of the namespace, mounted where the chart mounts the host's cgroup2 hierarchy:
 * the agent's socket hooks go there, never at the machine's cgroup2 root.
 */
function ownCgroupOf(lab: Lab, ns: string): string {
  const cgroup = lab.cgroupOf(ns);
  if (cgroup === null) throw new Error(`no cgroup for ${ns}'s agent: set the lab's (Lab.ownCgroup())`);
  return cgroup;
}
