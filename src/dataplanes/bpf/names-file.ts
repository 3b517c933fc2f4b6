// The names file: the maps hold only numbers, so the agent writes each programmed frontend's
// service port name beside them for `list` and `trace` (inspect.ts) to read.

import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import type { Logger } from '../../logger.js';
import { type BpfPlan, plannedFrontend } from './plan.js';

/** Service port names of the programmed frontends: the maps only hold numbers. */
export interface FrontendNames {
  frontends: { serviceId: number; servicePortName: string; kind: string }[];
}

export function namesFilePath(pinPath: string): string {
  return `/run/kube-bpf-proxy/${pinPath.replace(/^\/+/, '').replace(/\//g, '_')}.names.json`;
}

const named = (f: BpfPlan['frontends'][number]) => `${f.serviceId}\u0000${f.servicePortName}\u0000${f.kind}`;

export class NamesFile {
  /** What the file holds, by frontend name; null until it is written. */
  private written: Map<string, string> | null = null;

  constructor(
    readonly path: string,
    private readonly log: Logger,
  ) {}

  /** Rewrites the file when a frontend's name, id or kind changed: a change of endpoints
   * alone (most changes) leaves it as it is. */
  write(plan: BpfPlan, scope: ReadonlySet<string> | null): void {
    const written = this.written;
    if (scope && written) {
      const unchanged = (name: string) => {
        const f = plannedFrontend(plan, name);
        return written.get(name) === (f ? named(f) : undefined);
      };
      if ([...scope].every(unchanged)) return;
    }
    const names: FrontendNames = {
      frontends: plan.frontends.map((f) => ({
        serviceId: f.serviceId,
        servicePortName: f.servicePortName,
        kind: f.kind,
      })),
    };
    try {
      mkdirSync(dirname(this.path), { recursive: true });
      writeFileSync(this.path, `${JSON.stringify(names)}\n`);
      this.written = new Map(plan.frontends.map((f) => [f.name, named(f)]));
    } catch (err) {
      this.written = null;
      this.log.debug({ err, path: this.path }, 'could not write frontend names for list/trace');
    }
  }
}
