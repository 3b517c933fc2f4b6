// The address families kernel cases run in: IPv4's addresses as a case writes them, or, for IPv6,
// each of them in the low 32 bits of fd00::/96 (10.96.0.10 is fd00::a60:a, a /24 is a /120), so
// one case body serves both.

import { it } from 'vitest';
import type { IPFamily } from '../../src/model/types.js';
import { canonicalIP } from '../../src/net/ip.js';

export interface FamilyCase {
  family: IPFamily;
  v4: boolean;
  /** The family's counterpart of an IPv4 address. */
  A: (address: string) => string;
  /** ... of an IPv4 CIDR. */
  cidr: (cidr: string) => string;
}

const v6 = (address: string) => canonicalIP(`fd00::${address}`)!;

export const FAMILY_CASES: readonly FamilyCase[] = [
  { family: 'IPv4', v4: true, A: (address) => address, cidr: (cidr) => cidr },
  {
    family: 'IPv6',
    v4: false,
    A: v6,
    cidr: (cidr) => {
      const [address, bits] = cidr.split('/');
      return `${v6(address!)}/${96 + Number(bits)}`;
    },
  },
];

/**
 * `it` for the IPv4 case of a parametrised block and nothing for the IPv6 one: a case about what
 * only IPv4 has (header options, its ICMP) or that the IPv6 path does not do yet (ICMP errors
 * about flows) is declared once, not reported as a skipped IPv6 test.
 */
export function itIPv4Only(v4: boolean): (name: string, body: () => unknown, timeout?: number) => void {
  return v4 ? (name, body, timeout) => it(name, body, timeout) : () => undefined;
}
