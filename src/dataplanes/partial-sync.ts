// kube-proxy's partial syncs for the rule modes (iptables, nftables): a sync rewrites only the
// blocks (one service port's chains and rules) of the Services the change set names, plus any block
// whose text changed for a reason the change set cannot see (a node-wide fact, a shared endpoint).
// When a sync is full is decided once, by the sync loop (ChangeSet.fullSyncRequired: the first
// sync, hourly, after a failure); a family that failed on its own stays full until it succeeds.

import type { ChangeSet } from '../brain/dataplane.js';

/** What a rule mode writes per service port: `key` names the block, `service` its "namespace/name". */
export interface SyncBlock {
  key: string;
  service: string;
}

export class PartialSyncState {
  private fullRequired = true;
  /** Block key → the text last written for it. */
  private applied = new Map<string, string>();

  /** Whether this sync must rewrite everything. */
  isFull(changes: ChangeSet): boolean {
    return changes.fullSyncRequired || this.fullRequired;
  }

  /** Every sync stays full until a full sync has succeeded. */
  requireFull(): void {
    this.fullRequired = true;
  }

  /** The blocks a partial sync rewrites, given every block's current text. */
  mustWrite(changes: ChangeSet, texts: ReadonlyMap<string, string>): (block: SyncBlock) => boolean {
    return (block) =>
      changes.changedServices.has(block.service) || this.applied.get(block.key) !== texts.get(block.key);
  }

  /** The kernel now holds `texts`. */
  committed(texts: Map<string, string>): void {
    this.applied = texts;
    this.fullRequired = false;
  }
}
