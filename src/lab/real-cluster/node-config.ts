// The files a node of the real cluster runs on (pure): the kubelet's configuration, containerd's
// (1.6 and 2.x differ in layout), the CNI network list. Settings and the reasons for them are
// from the measured recipe of docs/conformance.md.

import { anyRoute } from './addresses.js';

/** The container runtimes the nodes use: Debian's containerd 1.6, and 2.4 built with `go install`. */
export type Runtime = 'containerd-1.6' | 'containerd-2.4';

export interface NodeSpec {
  name: string;
  /** The node's addresses on the wire between the nodes (its InternalIPs), one per family, IPv4 first. */
  ips: string[];
  runtime: Runtime;
  /** Per-node state: containerd's root, the kubelet's /var/lib, logs, configs. */
  stateDir: string;
  /** The kubelet's cgroupRoot, e.g. /node1: the node's own cgroup in every hierarchy. */
  cgroupRoot: string;
}

/** The sandbox image of the v1.37.2 e2e image manifest and containerd 2.4's default. */
export const PAUSE_IMAGE = 'registry.k8s.io/pause:3.10.2';
export const CLUSTER_DOMAIN = 'cluster.local';

export const containerdSocket = (node: NodeSpec) => `${node.stateDir}/containerd.sock`;
export const cniConfDir = (node: NodeSpec) => `${node.stateDir}/cni/net.d`;

/**
 * The KubeletConfiguration. failCgroupV1: false, or kubelet 1.35+ refuses this cgroup v1 (hybrid)
 * host; cgroupfs and a per-node cgroupRoot, so each node's pods live under its own cgroup;
 * enforceNodeAllocatable empty and eviction thresholds low: the nodes share one machine's memory
 * and disk, which the kubelet would otherwise read as pressure.
 */
export function kubeletConfig(node: NodeSpec, clusterDNS: string): string {
  return `${JSON.stringify(
    {
      apiVersion: 'kubelet.config.k8s.io/v1beta1',
      kind: 'KubeletConfiguration',
      failCgroupV1: false,
      failSwapOn: false,
      cgroupDriver: 'cgroupfs',
      cgroupRoot: node.cgroupRoot,
      containerRuntimeEndpoint: `unix://${containerdSocket(node)}`,
      authentication: { anonymous: { enabled: true }, webhook: { enabled: false } },
      authorization: { mode: 'AlwaysAllow' },
      clusterDomain: CLUSTER_DOMAIN,
      clusterDNS: [clusterDNS],
      enforceNodeAllocatable: [],
      evictionHard: {
        'memory.available': '100Mi',
        'nodefs.available': '1%',
        'imagefs.available': '1%',
        'nodefs.inodesFree': '1%',
      },
      imageGCHighThresholdPercent: 100,
      imageGCLowThresholdPercent: 99,
      protectKernelDefaults: false,
      serializeImagePulls: false,
      readOnlyPort: 0,
      // Pods report Ready sooner: the e2e specs create and wait for many.
      nodeStatusUpdateFrequency: '4s',
    },
    null,
    2,
  )}\n`;
}

/**
 * containerd's configuration: its own root, state and socket; the sandbox image by the name the
 * images were imported under; restrict_oom_score_adj, or runc fails every sandbox here (root lacks
 * CAP_SYS_RESOURCE and the pause container asks for oom_score_adj -998); the CNI plugins and this
 * node's CNI configuration directory.
 */
export function containerdConfig(node: NodeSpec, cniBin: string): string {
  const common = [
    `root = "${node.stateDir}/containerd/root"`,
    // /run is the node's own tmpfs.
    'state = "/run/containerd"',
    '[grpc]',
    `  address = "${containerdSocket(node)}"`,
  ];
  const opt = `path = "${node.stateDir}/containerd/opt"`;
  if (node.runtime === 'containerd-1.6')
    return [
      'version = 2',
      ...common,
      '[plugins."io.containerd.internal.v1.opt"]',
      `  ${opt}`,
      '[plugins."io.containerd.grpc.v1.cri"]',
      `  sandbox_image = "${PAUSE_IMAGE}"`,
      '  restrict_oom_score_adj = true',
      '  [plugins."io.containerd.grpc.v1.cri".containerd]',
      '    snapshotter = "overlayfs"',
      '  [plugins."io.containerd.grpc.v1.cri".cni]',
      `    bin_dir = "${cniBin}"`,
      `    conf_dir = "${cniConfDir(node)}"`,
      '',
    ].join('\n');
  return [
    'version = 3',
    ...common,
    "[plugins.'io.containerd.internal.v1.opt']",
    `  ${opt}`,
    "[plugins.'io.containerd.cri.v1.images']",
    "  snapshotter = 'overlayfs'",
    "  [plugins.'io.containerd.cri.v1.images'.pinned_images]",
    `    sandbox = '${PAUSE_IMAGE}'`,
    "[plugins.'io.containerd.cri.v1.runtime']",
    '  restrict_oom_score_adj = true',
    "  [plugins.'io.containerd.cri.v1.runtime'.cni]",
    `    bin_dirs = ['${cniBin}']`,
    `    conf_dir = '${cniConfDir(node)}'`,
    '',
  ].join('\n');
}

/**
 * The CNI network: a bridge (cni0) with host-local addresses from the node's pod CIDRs (one range
 * and one default route per family: a pod of a dual-stack node gets an address of each), as
 * kubeadm guides set it up; ipMasq off, or pods on the other node see the node's address instead
 * of the client pod's; hairpin mode, so a pod reaches itself through a Service; portmap for
 * hostPorts.
 */
export function cniConfig(podCIDRs: readonly string[]): string {
  return `${JSON.stringify(
    {
      cniVersion: '1.0.0',
      name: 'kbpc',
      plugins: [
        {
          type: 'bridge',
          bridge: 'cni0',
          isGateway: true,
          ipMasq: false,
          hairpinMode: true,
          ipam: {
            type: 'host-local',
            ranges: podCIDRs.map((subnet) => [{ subnet }]),
            routes: podCIDRs.map((cidr) => ({ dst: anyRoute(cidr) })),
            dataDir: '/var/lib/cni/networks',
          },
        },
        { type: 'portmap', capabilities: { portMappings: true } },
      ],
    },
    null,
    2,
  )}\n`;
}
