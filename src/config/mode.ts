// Which section of the file a proxy mode reads. kube-proxy converts v1alpha1 to its internal
// configuration the same way: ipvs and nftables read their own sections, every other mode
// (iptables, and for us bpf) reads `iptables:`.

/** `mode: ""` is kube-proxy's "best available", which is iptables for kube-proxy and bpf for us. */
export function effectiveMode(mode: string): string {
  return mode === '' ? 'bpf' : mode;
}

export type PeriodSection = 'iptables' | 'nftables' | 'ipvs';

export function periodSectionOf(mode: string): PeriodSection {
  const m = effectiveMode(mode);
  return m === 'ipvs' || m === 'nftables' ? m : 'iptables';
}

/** masqueradeBit and masqueradeAll: ipvs marks packets with iptables rules, so it reads `iptables:`. */
export function masqueradeSectionOf(mode: string): 'iptables' | 'nftables' {
  return effectiveMode(mode) === 'nftables' ? 'nftables' : 'iptables';
}
