// `render --proxy-mode bpf`: the plan as text, for a reader.

import type { ProxyDecisions } from '../../brain/types.js';
import type { BpfConfig } from '../../config/types.js';
import type { IPFamily } from '../../model/types.js';
import { IdAllocator } from './ids.js';
import { planBpf } from './plan.js';
import { DATAPATH_FAMILIES, frontendLabel } from './types.js';

/**
 * `render --proxy-mode bpf`: the frontends and backends a node starting from empty maps would get,
 * with the map sizes of `bpf`; the ids are those a fresh agent would allocate.
 */
export function renderBpfText(decisions: ProxyDecisions, bpf: BpfConfig, family?: IPFamily): string {
  const sizes = bpf.mapSizes;
  const plan = planBpf(
    { ...decisions, families: decisions.families.filter((f) => !family || f.family === family) },
    {
      defaultScheduler: bpf.scheduler,
      maglevFrontends: bpf.maglevFrontends,
      families: DATAPATH_FAMILIES,
      capacity: {
        frontends: sizes.services,
        backends: sizes.backends - 1,
        slots: Math.floor(sizes.backendSlots / 2),
        sourceRanges: sizes.sourceRanges,
      },
      nowMs: 0,
    },
    {
      serviceIds: new IdAllocator('service', 1, sizes.services, 0),
      backendIds: new IdAllocator('backend', 1, sizes.backends - 1, 0),
    },
  );
  const backends = new Map(plan.backends.map((b) => [b.id, b]));
  const lines: string[] = [];
  for (const f of plan.frontends) {
    const flags = [
      f.localOnly ? 'local-only' : '',
      f.hasInternalScope ? 'two-scopes' : '',
      f.affinityTimeoutSeconds > 0 ? `affinity=${f.affinityTimeoutSeconds}s` : '',
      f.sourceRanges.length > 0 ? `source-ranges=${f.sourceRanges.join(',')}` : '',
    ].filter(Boolean);
    lines.push(
      `${frontendLabel(f.key)}  ${f.kind}  ${f.servicePortName}  svc ${f.serviceId}  ${f.action}  ${f.scheduler}${flags.length > 0 ? `  [${flags.join(' ')}]` : ''}`,
    );
    f.backendIds.forEach((id, slot) => {
      const b = backends.get(id);
      const notes = [slot < f.localCount ? 'local' : '', b?.terminating ? 'terminating' : ''].filter(Boolean);
      lines.push(
        `  slot ${slot}  backend ${id}  ${b?.name ?? '?'}${notes.length > 0 ? `  (${notes.join(', ')})` : ''}`,
      );
    });
  }
  for (const problem of plan.problems)
    lines.push(`not programmed: ${problem.servicePortName}: ${problem.reason}`);
  return lines.length > 0 ? `${lines.join('\n')}\n` : '';
}
