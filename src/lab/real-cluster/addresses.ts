// The real cluster's addresses per IP family (pure): single-stack IPv4, or dual-stack with IPv4
// first, as kubeadm's dual-stack setup has it (podSubnet and serviceSubnet with a CIDR of each
// family, the primary one first): the pod and Service CIDRs, the per-node pod CIDR size, and the
// wire between the nodes, where the control plane is host 1 and node N host N+1 of each family.

export const IP_FAMILY_MODES = ['ipv4', 'dual'] as const;
export type IpFamilyMode = (typeof IP_FAMILY_MODES)[number];

export interface FamilyAddresses {
  family: 'IPv4' | 'IPv6';
  clusterCIDR: string;
  serviceCIDR: string;
  /** kube-controller-manager's --node-cidr-mask-size-ipv4/-ipv6. */
  nodeMaskSize: number;
  /** The wire's prefix; wireAddress(1) is the control plane's, wireAddress(N + 1) node N's. */
  wirePrefix: number;
  wireAddress(host: number): string;
}

const IPV4: FamilyAddresses = {
  family: 'IPv4',
  clusterCIDR: '10.244.0.0/16',
  serviceCIDR: '10.96.0.0/16',
  nodeMaskSize: 24,
  wirePrefix: 24,
  wireAddress: (host) => `10.250.0.${host}`,
};

// Unique local addresses; /64 per node, kube-controller-manager's default for IPv6, and a /112 of
// Services, the size kubeadm's dual-stack examples give.
const IPV6: FamilyAddresses = {
  family: 'IPv6',
  clusterCIDR: 'fd00:10:244::/56',
  serviceCIDR: 'fd00:10:96::/112',
  nodeMaskSize: 64,
  wirePrefix: 64,
  wireAddress: (host) => `fd00:10:250::${host.toString(16)}`,
};

export function clusterFamilies(mode: IpFamilyMode): FamilyAddresses[] {
  return mode === 'dual' ? [IPV4, IPV6] : [IPV4];
}

const isIPv6 = (address: string) => address.includes(':');

/** The default route's destination in the family of an address or CIDR. */
export const anyRoute = (address: string): string => (isIPv6(address) ? '::/0' : '0.0.0.0/0');

/** The one of `addresses` in the family of `address` (an address or CIDR). */
export function ofFamily(addresses: readonly string[], address: string): string {
  const found = addresses.find((a) => isIPv6(a) === isIPv6(address));
  if (found === undefined) throw new Error(`no address of ${address}'s family in ${addresses.join(', ')}`);
  return found;
}

/** The list form of kube-controller-manager's and kube-proxy's comma-separated flags. */
export const joined = (families: readonly FamilyAddresses[], key: 'clusterCIDR' | 'serviceCIDR') =>
  families.map((f) => f[key]).join(',');

/**
 * kube-controller-manager's pod CIDR allocation: the cluster CIDRs and a mask size per family
 * (--node-cidr-mask-size is refused in a dual-stack cluster: `setNodeCIDRMaskSizes` in
 * cmd/kube-controller-manager/app/core.go at v1.37.2) and the Service CIDRs.
 */
export function controllerManagerArgs(families: readonly FamilyAddresses[]): string[] {
  return [
    '--allocate-node-cidrs=true',
    `--cluster-cidr=${joined(families, 'clusterCIDR')}`,
    ...families.map((f) => `--node-cidr-mask-size-${f.family.toLowerCase()}=${f.nodeMaskSize}`),
    `--service-cluster-ip-range=${joined(families, 'serviceCIDR')}`,
  ];
}
