// Would the node's netfilter masquerade a local pod's packet to another node's pod? Host routing
// (host-route.ts, remoteBypass) carries such a flow past netfilter only where the answer is a
// proven "never": a CNI's masquerade (flannel's rule for traffic leaving the pod network, the
// bridge and ptp plugins' ipMasq) would otherwise be skipped, and the other node would see the
// pod's own address where the CNI meant it to see the node's. The rules are read as
// `iptables-save -t nat` prints them (both backends, both families); anything this reader does
// not understand counts as "may masquerade".

import { type ParsedCIDR, parseCIDR } from '../../net/ip.js';

/** One `-A` line of the nat table: its chain, matches and target. */
export interface NatRule {
  chain: string;
  /** Each match: an option (-s, -d, -o, -p) with its value and negation, or one not understood. */
  matches: ({ option: string; value: string; negated: boolean } | { unknown: string })[];
  /** -j TARGET or -g TARGET (goto); empty when the rule has none (a counting rule). */
  target: string;
  goto: boolean;
}

/** The nat table: its rules by chain, in order. */
export type NatTable = ReadonlyMap<string, readonly NatRule[]>;

/** Splits an iptables-save rule into words, honouring its double quotes (comments). */
function words(line: string): string[] {
  return [...line.matchAll(/"((?:[^"\\]|\\.)*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? '');
}

/** Match options this reader judges (their long forms as iptables-save never prints them). */
const OPTIONS: Record<string, string> = { '-s': '-s', '-d': '-d', '-o': '-o', '-p': '-p' };
/** Match modules that never change whether a rule applies: their options are skipped. */
const NEUTRAL_MODULES: Record<string, number> = { comment: 2 };

function parseRule(line: string): NatRule | null {
  const w = words(line);
  if (w[0] !== '-A' || !w[1]) return null;
  const rule: NatRule = { chain: w[1], matches: [], target: '', goto: false };
  let negated = false;
  for (let i = 2; i < w.length; i++) {
    const word = w[i]!;
    if (word === '!') {
      negated = true;
      continue;
    }
    if (word === '-j' || word === '-g') {
      rule.target = w[i + 1] ?? '';
      rule.goto = word === '-g';
      break;
    }
    const option = OPTIONS[word];
    if (option) {
      rule.matches.push({ option, value: w[++i] ?? '', negated });
    } else if (word === '-m' && NEUTRAL_MODULES[w[i + 1] ?? ''] !== undefined) {
      i += 1 + (NEUTRAL_MODULES[w[i + 1]!] ?? 0);
    } else if (word === '-m') {
      // A module with options of its own (mark, set, addrtype, ...): not judged. Its options are
      // skipped up to the next word this reader knows.
      rule.matches.push({ unknown: `-m ${w[i + 1] ?? ''}` });
      i++;
      while (i + 1 < w.length && !['-j', '-g', '-m', ...Object.keys(OPTIONS)].includes(w[i + 1]!)) i++;
    } else {
      rule.matches.push({ unknown: word });
    }
    negated = false;
  }
  return rule;
}

/** The nat table of one or more `iptables-save -t nat` dumps, in the order given (pure). */
export function parseNatTable(dumps: readonly string[]): NatTable {
  const table = new Map<string, NatRule[]>();
  for (const dump of dumps) {
    let inNat = false;
    for (const line of dump.split('\n')) {
      if (line.startsWith('*')) inNat = line.trim() === '*nat';
      if (!inNat) continue;
      const chain = /^:(\S+)/.exec(line)?.[1];
      if (chain && !table.has(chain)) table.set(chain, []);
      const rule = parseRule(line.trim());
      if (rule) table.set(rule.chain, [...(table.get(rule.chain) ?? []), rule]);
    }
  }
  return table;
}

/** The packets judged: from any address of `src`, to any address of `dst`, out of `dev`. */
export interface NatPacket {
  src: ParsedCIDR;
  dst: ParsedCIDR;
  dev: string;
}

/** An address or a prefix as a prefix (an address is its own /32 or /128). */
export function prefixOf(text: string): ParsedCIDR | null {
  return parseCIDR(text.includes('/') ? text : `${text}/${text.includes(':') ? 128 : 32}`);
}

/** Does every address of `inner` lie in `outer` (true), none (false), or some (null)? */
export function cidrRelation(outer: ParsedCIDR, inner: ParsedCIDR): boolean | null {
  if (outer.family !== inner.family) return false;
  const bits = Math.min(outer.prefixLength, inner.prefixLength);
  for (let bit = 0; bit < bits; bit++) {
    const mask = 0x80 >> (bit & 7);
    if (((outer.network[bit >> 3] ?? 0) & mask) !== ((inner.network[bit >> 3] ?? 0) & mask)) return false;
  }
  return outer.prefixLength <= inner.prefixLength ? true : null;
}

/** An interface pattern: a trailing "+" matches any name with that prefix. */
function devMatches(pattern: string, dev: string): boolean {
  return pattern.endsWith('+') ? dev.startsWith(pattern.slice(0, -1)) : dev === pattern;
}

/** Does the rule apply to every packet judged (true), to none (false), or maybe to some (null)? */
function ruleApplies(rule: NatRule, pkt: NatPacket): boolean | null {
  let result: boolean | null = true;
  for (const m of rule.matches) {
    let r: boolean | null = null;
    if ('option' in m) {
      if (m.option === '-s' || m.option === '-d') {
        const cidr = prefixOf(m.value);
        r = cidr ? cidrRelation(cidr, m.option === '-s' ? pkt.src : pkt.dst) : null;
      } else if (m.option === '-o') {
        r = devMatches(m.value, pkt.dev);
      } else if (m.option === '-p' && m.value === 'all') {
        r = true;
      }
      if (r !== null && m.negated) r = !r;
    }
    if (r === false) return false;
    if (r === null) result = null;
  }
  return result;
}

/** What a chain can do to the packets: masquerade them, accept them, return, or run off its end. */
type Outcome = 'masquerade' | 'accept' | 'return' | 'end';

/** Targets that let the packet go on to the next rule. */
const CONTINUING = new Set(['', 'LOG', 'NFLOG', 'MARK', 'CONNMARK']);

function targetOutcomes(
  table: NatTable,
  rule: NatRule,
  pkt: NatPacket,
  depth: number,
): Set<Outcome | 'next'> {
  const { target } = rule;
  if (target === 'RETURN') return new Set(['return']);
  if (target === 'ACCEPT') return new Set(['accept']);
  if (CONTINUING.has(target)) return new Set(['next']);
  if (!table.has(target) || depth > 16) return new Set(['masquerade']);
  const out = new Set<Outcome | 'next'>();
  for (const o of chainOutcomes(table, target, pkt, depth + 1)) {
    if (o === 'masquerade' || o === 'accept') out.add(o);
    // Back from a jump the caller goes on; back from a goto the caller returns.
    else out.add(rule.goto ? 'return' : 'next');
  }
  return out;
}

/** Every outcome a chain may have for the packets: a rule that may or may not apply is followed
 * both ways, a target not understood (SNAT, NETMAP, DNAT, ...) counts as masquerading. */
function chainOutcomes(table: NatTable, chain: string, pkt: NatPacket, depth: number): Set<Outcome> {
  const out = new Set<Outcome>();
  for (const rule of table.get(chain) ?? []) {
    const applies = ruleApplies(rule, pkt);
    if (applies === false) continue;
    const targets = targetOutcomes(table, rule, pkt, depth);
    for (const t of targets) if (t !== 'next') out.add(t);
    if (applies === true && !targets.has('next')) return out;
  }
  out.add('end');
  return out;
}

/** Does POSTROUTING of `table` leave every packet judged untranslated (pure)? */
export function neverMasqueraded(table: NatTable, pkt: NatPacket): boolean {
  return !chainOutcomes(table, 'POSTROUTING', pkt, 0).has('masquerade');
}
