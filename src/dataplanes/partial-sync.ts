// kube-proxy's partial syncs for the rule modes (iptables, nftables): a sync rewrites only the
// blocks (one service port's chains and rules) of the Services the change set names, plus any block
// whose text changed for a reason the change set cannot see (a node-wide fact, a shared endpoint).
// When a sync is full is decided once, by the sync loop (SyncScope.full: the first sync, hourly,
// after a failure); a family that failed on its own widens its syncs to full until one succeeds.

import { escalate, type SyncScope } from '../brain/dataplane.js';

/** What a rule mode writes per service port: `key` names the block, `service` its "namespace/name". */
export interface SyncBlock {
  key: string;
  service: string;
}

export class PartialSyncState {
  /** Why this family's next sync must be full; null once a full sync has succeeded. */
  private fullRequired: string | null = 'first sync of this family';
  /** Block key → the text last written for it. */
  private applied = new Map<string, string>();

  /** The scope this family syncs with: the loop's, widened to full until a full sync succeeded. */
  scopeFor(scope: SyncScope, mode: string): SyncScope {
    return escalate(scope, this.fullRequired === null ? null : `${mode}: ${this.fullRequired}`);
  }

  /** Every sync stays full until a full sync has succeeded; the first reason given is kept. */
  requireFull(reason: string): void {
    this.fullRequired ??= reason;
  }

  /** The blocks a partial sync rewrites, given every block's current text. */
  mustWrite(changes: SyncScope, texts: ReadonlyMap<string, string>): (block: SyncBlock) => boolean {
    return (block) =>
      changes.changedServices.has(block.service) || this.applied.get(block.key) !== texts.get(block.key);
  }

  /** The kernel now holds `texts`. */
  committed(texts: Map<string, string>): void {
    this.applied = texts;
    this.fullRequired = null;
  }
}
