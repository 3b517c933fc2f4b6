// IP and CIDR handling with kube-proxy's rules: addresses from the API are parsed "sloppily"
// (k8s.io/utils/net ParseIPSloppy: IPv4 fields may carry leading zeros, read as decimal) and
// printed canonically the way Go's net.IP.String() prints them. An IPv4-mapped IPv6 address
// (::ffff:a.b.c.d) is IPv4 for Go, so it is here too.

export type IPFamily = 'IPv4' | 'IPv6';
export const IP_FAMILIES: readonly IPFamily[] = ['IPv4', 'IPv6'];

export interface ParsedIP {
  family: IPFamily;
  /** 4 bytes for IPv4, 16 for IPv6. */
  bytes: Uint8Array;
}

export interface ParsedCIDR {
  family: IPFamily;
  /** The network address (host bits cleared), as Go's ParseCIDR returns it. */
  network: Uint8Array;
  prefixLength: number;
}

/** Four dot-separated decimal fields, each 0-255 (leading zeros read as decimal), in one pass: the
 * batch writes of a cold sync parse 10^5 addresses. */
function parseIPv4Fields(text: string): Uint8Array | null {
  const bytes = new Uint8Array(4);
  let field = 0;
  let value = 0;
  let digits = 0;
  for (let i = 0; i <= text.length; i++) {
    const c = i < text.length ? text.charCodeAt(i) : 46;
    if (c === 46) {
      if (digits === 0 || field > 3) return null;
      bytes[field++] = value;
      value = 0;
      digits = 0;
    } else if (c >= 48 && c <= 57) {
      value = value * 10 + (c - 48);
      if (value > 255) return null;
      digits++;
    } else return null;
  }
  return field === 4 ? bytes : null;
}

function parseIPv6(text: string): Uint8Array | null {
  if (text.includes('%')) return null;
  const bytes = new Uint8Array(16);
  let body = text;
  let tail: Uint8Array | null = null;
  const lastColon = body.lastIndexOf(':');
  if (lastColon >= 0 && body.slice(lastColon + 1).includes('.')) {
    tail = parseIPv4Fields(body.slice(lastColon + 1));
    if (!tail) return null;
    body = `${body.slice(0, lastColon + 1)}0:0`;
  }
  const halves = body.split('::');
  if (halves.length > 2) return null;
  const parseGroups = (part: string): number[] | null => {
    if (part === '') return [];
    const groups = part.split(':');
    const out: number[] = [];
    for (const group of groups) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(group)) return null;
      out.push(Number.parseInt(group, 16));
    }
    return out;
  };
  const head = parseGroups(halves[0] ?? '');
  const rest = halves.length === 2 ? parseGroups(halves[1] ?? '') : [];
  if (!head || !rest) return null;
  const total = head.length + rest.length;
  if (halves.length === 1 ? total !== 8 : total > 7) return null;
  const groups = [...head, ...new Array<number>(8 - total).fill(0), ...rest];
  groups.forEach((g, i) => {
    bytes[2 * i] = g >> 8;
    bytes[2 * i + 1] = g & 0xff;
  });
  if (tail) bytes.set(tail, 12);
  return bytes;
}

function isIPv4Mapped(bytes: Uint8Array): boolean {
  for (let i = 0; i < 10; i++) if (bytes[i] !== 0) return false;
  return bytes[10] === 0xff && bytes[11] === 0xff;
}

/** ParseIPSloppy followed by Go's family rule (To4() != nil means IPv4). */
export function parseIP(text: string): ParsedIP | null {
  if (text.includes(':')) {
    const bytes = parseIPv6(text);
    if (!bytes) return null;
    if (isIPv4Mapped(bytes)) return { family: 'IPv4', bytes: bytes.slice(12) };
    return { family: 'IPv6', bytes };
  }
  const bytes = parseIPv4Fields(text);
  return bytes ? { family: 'IPv4', bytes } : null;
}

/** Go's net.IP.String(): dotted quad, or RFC 5952 IPv6 (longest zero run, first on ties, only if ≥ 2 groups). */
export function formatIP(bytes: Uint8Array): string {
  if (bytes.length === 4) return Array.from(bytes).join('.');
  const groups: number[] = [];
  for (let i = 0; i < 8; i++) groups.push(((bytes[2 * i] ?? 0) << 8) | (bytes[2 * i + 1] ?? 0));
  let bestStart = -1;
  let bestLength = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLength) {
      bestStart = i;
      bestLength = j - i;
    }
    i = j;
  }
  const hex = (g: number) => g.toString(16);
  if (bestLength < 2) return groups.map(hex).join(':');
  const left = groups.slice(0, bestStart).map(hex).join(':');
  const right = groups
    .slice(bestStart + bestLength)
    .map(hex)
    .join(':');
  return `${left}::${right}`;
}

/** The canonical form of an address, or null when it does not parse. */
export function canonicalIP(text: string): string | null {
  const parsed = parseIP(text.trim());
  return parsed ? formatIP(parsed.bytes) : null;
}

export function ipFamilyOf(text: string): IPFamily | null {
  return parseIP(text)?.family ?? null;
}

/** The canonical address if it parses and is of the family; null otherwise. */
/** An IPv4 address already as Go prints it (no leading zeros): most addresses from the API. */
const CANONICAL_IPV4 = /^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$/;

export function canonicalIPOfFamily(text: string, family: IPFamily): string | null {
  // The common case without the bytes: a parse and a print give the text back.
  if (CANONICAL_IPV4.test(text)) return family === 'IPv4' ? text : null;
  const parsed = parseIP(text);
  return parsed && parsed.family === family ? formatIP(parsed.bytes) : null;
}

export function parseCIDR(text: string): ParsedCIDR | null {
  const slash = text.indexOf('/');
  if (slash < 0) return null;
  const prefixText = text.slice(slash + 1);
  if (!/^[0-9]{1,3}$/.test(prefixText)) return null;
  const addressText = text.slice(0, slash);
  // A CIDR written in IPv6 notation stays IPv6 (Go keeps ::ffff:0:0/96 as a 16-byte mask).
  const bytes = addressText.includes(':') ? parseIPv6(addressText) : parseIPv4Fields(addressText);
  if (!bytes) return null;
  const prefixLength = Number.parseInt(prefixText, 10);
  if (prefixLength > bytes.length * 8) return null;
  const network = bytes.slice();
  for (let bit = prefixLength; bit < network.length * 8; bit++) {
    network[bit >> 3] = (network[bit >> 3] ?? 0) & ~(0x80 >> (bit & 7));
  }
  return { family: bytes.length === 4 ? 'IPv4' : 'IPv6', network, prefixLength };
}

export function formatCIDR(cidr: ParsedCIDR): string {
  return `${formatIP(cidr.network)}/${cidr.prefixLength}`;
}

export function cidrContains(cidr: ParsedCIDR, ip: ParsedIP): boolean {
  if (cidr.network.length !== ip.bytes.length) return false;
  for (let bit = 0; bit < cidr.prefixLength; bit++) {
    const mask = 0x80 >> (bit & 7);
    if (((cidr.network[bit >> 3] ?? 0) & mask) !== ((ip.bytes[bit >> 3] ?? 0) & mask)) return false;
  }
  return true;
}

export function isLoopback(ip: ParsedIP): boolean {
  if (ip.family === 'IPv4') return ip.bytes[0] === 127;
  return ip.bytes.every((b, i) => (i === 15 ? b === 1 : b === 0));
}

/** net.JoinHostPort: brackets around IPv6 literals. */
export function joinHostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}

/** The address's bytes, in network order; throws unless it is an address of `family`. */
export function ipBytes(text: string, family: IPFamily): Uint8Array {
  const parsed = parseIP(text);
  if (!parsed || parsed.family !== family)
    throw new Error(`not an ${family} address: ${JSON.stringify(text)}`);
  return parsed.bytes;
}
