// The pinned helm of scripts/install-helm.sh, run against the chart in charts/ with a private HOME,
// for the tests that install or render the chart.

import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';

const execFileAsync = promisify(execFile);
const ROOT = fileURLToPath(new URL('../..', import.meta.url));
export const HELM = join(ROOT, '.tools/bin/helm');
export const CHART = join(ROOT, 'charts/kube-bpf-proxy');

export interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; [key: string]: unknown };
  // biome-ignore lint/suspicious/noExplicitAny: rendered manifests are untyped YAML
  [key: string]: any;
}

/** Runs helm with its state under `home`; throws with helm's stderr on failure. */
export async function helm(home: string, args: string[]): Promise<string> {
  mkdirSync(home, { recursive: true });
  try {
    const { stdout } = await execFileAsync(HELM, args, {
      maxBuffer: 64 * 1024 * 1024,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: home,
        HELM_CACHE_HOME: join(home, 'cache'),
        HELM_CONFIG_HOME: join(home, 'config'),
        HELM_DATA_HOME: join(home, 'data'),
      },
    });
    return stdout;
  } catch (error) {
    const e = error as { stderr?: string; message: string };
    throw new Error(`helm ${args.join(' ')}: ${e.stderr?.trim() || e.message}`);
  }
}

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
