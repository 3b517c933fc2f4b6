// nft statements as text, in the syntax knftables prints: chains, rules, sets and maps of our
// table in one family, appended in order.

import { type NftFamily, TABLE } from './names.js';
import { quote } from './transaction.js';

/** Writes objects of one family's kube-proxy table, as knftables prints them. */
export class Writer {
  readonly lines: string[] = [];
  constructor(private readonly family: NftFamily) {}

  private object(kind: string, name: string): string {
    return `${kind} ${this.family} ${TABLE} ${name}`;
  }

  chain(name: string, spec = ''): void {
    this.lines.push(`add ${this.object('chain', name)}${spec === '' ? '' : ` { ${spec} }`}`);
  }
  /** add + flush: the chain exists and is empty, whether or not it existed before. */
  ensureChain(name: string): void {
    this.chain(name);
    this.lines.push(`flush ${this.object('chain', name)}`);
  }
  rule(chain: string, rule: string, comment?: string): void {
    this.lines.push(
      `add ${this.object('rule', chain)} ${rule}${comment ? ` comment ${quote(comment)}` : ''}`,
    );
  }
  set(name: string, spec: string): void {
    this.lines.push(`add ${this.object('set', name)} { ${spec} }`);
  }
  map(name: string, spec: string): void {
    this.lines.push(`add ${this.object('map', name)} { ${spec} }`);
  }
  raw(verb: string, kind: string, name: string): void {
    this.lines.push(`${verb} ${this.object(kind, name)}`);
  }
}
