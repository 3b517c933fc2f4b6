// What a real Kubernetes cluster on this machine runs, built and cached by
// scripts/install-cluster.sh: where each part is, as its --locate mode prints it.

import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

// The checkout's root, from src/lab (vitest) or dist/src/lab (the build).
const ROOT = fileURLToPath(
  new URL(import.meta.url.includes('/dist/src/') ? '../../../' : '../../', import.meta.url),
);

/** Absolute directories, one per line of `scripts/install-cluster.sh --locate`. */
export interface ClusterParts {
  /** kubelet, kube-scheduler, kubectl */
  node: string;
  /** containerd, containerd-shim-runc-v2, ctr (containerd 2.x; Debian's 1.6 is on PATH) */
  containerd: string;
  /** the CNI plugins bridge, host-local, loopback, portmap */
  cni: string;
  /** coredns */
  coredns: string;
  /** pause.tar, agnhost.tar, coredns.tar: OCI archives for `ctr -n k8s.io images import` */
  images: string;
  /** e2e.test, agnhost */
  e2e: string;
}

const KEYS: Record<string, keyof ClusterParts> = {
  KBP_NODE_BIN: 'node',
  KBP_CONTAINERD_BIN: 'containerd',
  KBP_CNI_BIN: 'cni',
  KBP_COREDNS_BIN: 'coredns',
  KBP_CLUSTER_IMAGES: 'images',
  KBP_E2E_BIN: 'e2e',
};

/** The parts named by --locate's KEY=DIR lines; null when a key is absent. */
export function parseClusterParts(text: string): ClusterParts | null {
  const parts: Partial<ClusterParts> = {};
  for (const line of text.split('\n')) {
    const eq = line.indexOf('=');
    const key = KEYS[line.slice(0, eq)];
    if (eq > 0 && key) parts[key] = line.slice(eq + 1);
  }
  const all = Object.values(KEYS).every((key) => parts[key]);
  return all ? (parts as ClusterParts) : null;
}

/** Where scripts/install-cluster.sh keeps the parts; null when one is missing (not built yet). */
export function locateClusterParts(): ClusterParts | null {
  try {
    const out = execFileSync('bash', [join(ROOT, 'scripts/install-cluster.sh'), '--locate'], {
      encoding: 'utf8',
    });
    return parseClusterParts(out);
  } catch {
    return null;
  }
}
