// The chart's objects as the tests that install or render it read them (helm itself: src/lab/helm.ts).

import { parseAllDocuments } from 'yaml';
import { CHART, helm } from '../../src/lab/helm.js';
import type { K8sObject } from '../../src/lab/kube-objects.js';

export type { K8sObject };

export function parseObjects(yamlText: string): K8sObject[] {
  return parseAllDocuments(yamlText)
    .map((doc) => doc.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null && typeof o === 'object' && typeof o.kind === 'string');
}

/** `helm template` of the chart (release kbp in kube-system) with `--set` values. */
export async function renderChart(home: string, sets: string[]): Promise<K8sObject[]> {
  const args = ['template', 'kbp', CHART, '-n', 'kube-system'];
  for (const set of sets) args.push('--set', set);
  return parseObjects(await helm(home, args));
}
