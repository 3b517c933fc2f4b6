// The nft transaction of one family, assembled from its ruleset (plan.ts) and what the applier
// decided: a full sync writes everything, a partial one the blocks it chose and the element
// changes; stale chains are flushed, then deleted once nothing jumps to them.

import type { IPFamily } from '../../model/types.js';
import { ELEMENT_CONTAINERS, isSetContainer, type NftFamily, nftFamily, TABLE } from './names.js';
import type { NftElement, NftRuleset, NftServicePortBlock } from './plan.js';

/** Go's %q for the plain ASCII our comments hold. */
export const quote = (text: string) => JSON.stringify(text);

export function elementLine(family: NftFamily, verb: 'add' | 'delete', element: NftElement): string {
  let body = element.key.join(' . ');
  if (verb === 'add') {
    if (element.comment !== null) body += ` comment ${quote(element.comment)}`;
    if (element.value !== null) body += ` : ${element.value.join(' . ')}`;
  }
  return `${verb} element ${family} ${TABLE} ${element.container} { ${body} }`;
}

/** Identity of an element within the table: container and key. */
export const elementId = (element: NftElement) => `${element.container} ${element.key.join(' . ')}`;
/** What must match for an existing element to stay: value and comment. */
const elementSignature = (element: NftElement) =>
  `${element.value?.join(' . ') ?? ''}|${element.comment ?? ''}`;

export function activeObjects(ruleset: NftRuleset): { chains: Set<string>; affinitySets: Set<string> } {
  const chains = new Set<string>();
  const affinitySets = new Set<string>();
  for (const block of ruleset.servicePorts) {
    for (const chain of block.chains) chains.add(chain);
    for (const set of block.affinitySets) affinitySets.add(set);
  }
  return { chains, affinitySets };
}

/** Every element of the ruleset by its identity (duplicates, e.g. a ClusterIP of several ports, once). */
export function desiredElements(ruleset: NftRuleset): Map<string, NftElement> {
  const elements = new Map<string, NftElement>();
  for (const block of ruleset.servicePorts) {
    for (const element of block.elements) {
      const id = elementId(element);
      if (!elements.has(id)) elements.set(id, element);
    }
  }
  return elements;
}

export interface ElementChanges {
  remove: NftElement[];
  add: NftElement[];
}

/** What turns the applied elements into the desired ones; a changed value is a delete and an add. */
export function diffElements(
  applied: ReadonlyMap<string, NftElement>,
  desired: ReadonlyMap<string, NftElement>,
): ElementChanges {
  const remove: NftElement[] = [];
  const add: NftElement[] = [];
  for (const [id, element] of applied) {
    const wanted = desired.get(id);
    if (!wanted || elementSignature(wanted) !== elementSignature(element)) remove.push(element);
  }
  for (const [id, element] of desired) {
    const had = applied.get(id);
    if (!had || elementSignature(had) !== elementSignature(element)) add.push(element);
  }
  return { remove, add };
}

export interface TransactionPlan {
  /** Table setup and fixed chains rewritten, every element container flushed and refilled. */
  full: boolean;
  /** The first sync of this process: base chains are re-created. */
  recreateBaseChains: boolean;
  /** Whether a service port's block is written; a partial sync leaves unchanged services out. */
  writeBlock: (block: NftServicePortBlock) => boolean;
  /** Partial syncs only: the element changes (full syncs write every element). */
  elementChanges: ElementChanges;
  /** Chains no longer used: flushed now, deleted by a later transaction. */
  staleChains: string[];
  /** Affinity sets no longer used: deleted now (nothing references them after the flushes). */
  staleAffinitySets: string[];
  /** Fixed chains of an older layout (mark-for-masquerade): deleted last, once nothing jumps to them. */
  legacyChains?: string[];
}

export interface NftTransaction {
  text: string;
  /** Service port blocks written. */
  blocksWritten: number;
  /** Element lines written (adds and deletes). */
  elementsWritten: number;
}

/** One `nft -f` transaction of one family. */
export function assembleTransaction(ruleset: NftRuleset, plan: TransactionPlan): NftTransaction {
  const family = nftFamily(ruleset.family);
  const lines: string[] = [];
  let elementsWritten = 0;
  if (plan.full) {
    lines.push(ruleset.tableLine);
    if (plan.recreateBaseChains) lines.push(...ruleset.recreateBaseChainLines);
    lines.push(...ruleset.setupLines);
    for (const container of ELEMENT_CONTAINERS) {
      lines.push(`flush ${isSetContainer(container) ? 'set' : 'map'} ${family} ${TABLE} ${container}`);
    }
  }
  let blocksWritten = 0;
  for (const block of ruleset.servicePorts) {
    if (!plan.full && !plan.writeBlock(block)) continue;
    lines.push(...block.lines);
    blocksWritten++;
  }
  if (plan.full) {
    for (const element of desiredElements(ruleset).values()) lines.push(elementLine(family, 'add', element));
    elementsWritten = lines.length;
  } else {
    const before = lines.length;
    for (const element of plan.elementChanges.remove) lines.push(elementLine(family, 'delete', element));
    for (const element of plan.elementChanges.add) lines.push(elementLine(family, 'add', element));
    elementsWritten = lines.length - before;
  }
  for (const chain of plan.staleChains) lines.push(`flush chain ${family} ${TABLE} ${chain}`);
  for (const set of plan.staleAffinitySets) lines.push(`delete set ${family} ${TABLE} ${set}`);
  for (const chain of plan.legacyChains ?? []) lines.push(`delete chain ${family} ${TABLE} ${chain}`);
  return { text: lines.length > 0 ? `${lines.join('\n')}\n` : '', blocksWritten, elementsWritten };
}

/** A transaction deleting chains flushed by an earlier one (kernels before 6.2 need the pause). */
export function deleteChainsTransaction(family: IPFamily, chains: string[]): string {
  return chains.map((chain) => `delete chain ${nftFamily(family)} ${TABLE} ${chain}\n`).join('');
}

/** A full sync's transaction for one family, as kube-proxy's first sync writes it. */
