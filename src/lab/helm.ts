// The pinned helm of scripts/install-helm.sh, run against the chart in charts/ with its state under
// a private HOME, for the labs and tests that render or install the chart.

import { execFile } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const execFileAsync = promisify(execFile);
// The checkout's root, from src/lab (vitest) or dist/src/lab (the build).
const ROOT = fileURLToPath(
  new URL(import.meta.url.includes('/dist/src/') ? '../../../' : '../../', import.meta.url),
);
export const HELM = join(ROOT, '.tools/bin/helm');
export const CHART = join(ROOT, 'charts/kube-bpf-proxy');

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
