// What one planned frontend wants in the maps (writer.ts writes it): its frontend value with the
// slot generation its backend list goes into, its Maglev table's signature and its source ranges.

import type { PlannedFrontend } from './plan.js';
import type { FrontendEntry, MaglevKey, SlotEntry, SlotKey, SourceRange } from './store.js';
import { type Mirror, maglevSignature, type PendingDeletions } from './writer-state.js';

/** kbp_slot_key.gen and kbp_svc_val.gen are 8-bit. */
const GENERATIONS = 256;

export const slotId = (k: SlotKey) => `${k.serviceId}/${k.gen}/${k.slot}`;
export const slotsOf = ({ planned, frontend }: FrontendEntries): SlotEntry[] =>
  planned.backendIds.map((backendId, slot) => ({
    serviceId: planned.serviceId,
    slot,
    gen: frontend.value.gen,
    backendId,
  }));
export const rangeId = (r: SourceRange) => `${r.serviceId}/${r.cidr}`;

/** What one frontend wants in the maps. Its slots (one per backend id, in the frontend's
 * generation) and its {backend, service} pairs (one per backend id) are made when written: a
 * full write of 10^5 endpoints holds no object per entry for its whole length. */
export interface FrontendEntries {
  planned: PlannedFrontend;
  frontend: FrontendEntry;
  maglev: { key: MaglevKey; signature: string } | null;
  sourceRanges: SourceRange[];
  /** True when the mirror has no frontend with this service id yet: its counters start at zero. */
  isNew: boolean;
}

export function entriesOf(
  planned: PlannedFrontend,
  mirror: Mirror,
  pendingSlots: PendingDeletions['slots'],
  backendOf: (id: number) => unknown,
  maglevTableSize: number,
): FrontendEntries {
  const { serviceId, backendIds } = planned;
  for (const id of backendIds)
    if (backendOf(id) === undefined) throw new Error(`plan names backend ${id} it does not hold`);
  const current = mirror.frontends.get(planned.name)?.value;
  const sameId = current?.serviceId === serviceId;
  const gen = generationFor(serviceId, backendIds, sameId ? current.gen : null, mirror, pendingSlots);
  const frontend: FrontendEntry = {
    key: planned.key,
    value: {
      serviceId,
      count: backendIds.length,
      localCount: planned.localCount,
      gen,
      scheduler: planned.scheduler,
      action: planned.action,
      kind: planned.kind,
      localOnly: planned.localOnly,
      hasInternalScope: planned.hasInternalScope,
      affinityTimeoutSeconds: planned.affinityTimeoutSeconds,
      checksSourceRanges: planned.sourceRanges.length > 0,
    },
  };
  return {
    planned,
    frontend,
    maglev:
      planned.scheduler === 'maglev' && backendIds.length > 0
        ? { key: { serviceId }, signature: maglevSignature(maglevTableSize, backendIds) }
        : null,
    sourceRanges: planned.sourceRanges.map((cidr) => ({ serviceId, family: planned.key.family, cidr })),
    isNew: !sameId,
  };
}

/**
 * The slot generation a frontend's list goes into: the live one when it holds the list already,
 * else another that holds it (one waiting out its grace period after a change that was undone),
 * else one nothing uses, so a generation readers may still see is never rewritten. Only after
 * 255 changes of one frontend within a grace period is the generation due soonest rewritten.
 */
function generationFor(
  serviceId: number,
  backendIds: readonly number[],
  liveGen: number | null,
  mirror: Mirror,
  pendingSlots: PendingDeletions['slots'],
): number {
  const byGen = new Map<number, { slots: Map<number, number>; dueMs: number }>();
  for (const s of mirror.slots.ofService(serviceId)) {
    const g = byGen.get(s.gen) ?? { slots: new Map<number, number>(), dueMs: Number.POSITIVE_INFINITY };
    g.slots.set(s.slot, s.backendId);
    g.dueMs = Math.min(g.dueMs, pendingSlots.get(slotId(s))?.dueMs ?? Number.NEGATIVE_INFINITY);
    byGen.set(s.gen, g);
  }
  const holds = (gen: number) => {
    const slots = byGen.get(gen)?.slots;
    return (
      (slots?.size ?? 0) === backendIds.length && backendIds.every((id, slot) => slots!.get(slot) === id)
    );
  };
  if (liveGen !== null && holds(liveGen)) return liveGen;
  for (const gen of byGen.keys()) if (gen !== liveGen && holds(gen)) return gen;
  for (let gen = 0; gen < GENERATIONS; gen++) if (gen !== liveGen && !byGen.has(gen)) return gen;
  let soonest = -1;
  for (const [gen, g] of byGen)
    if (gen !== liveGen && (soonest < 0 || g.dueMs < byGen.get(soonest)!.dueMs)) soonest = gen;
  return soonest;
}
