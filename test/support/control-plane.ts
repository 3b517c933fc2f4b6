// describe() for the tests that need the real control plane (src/lab/control-plane.ts).

import { describe } from 'vitest';
import { locateControlPlane } from '../../src/lab/control-plane.js';
import { describeRoot } from './privileges.js';

/**
 * They need root too (describeRoot), and outside CI they skip, saying why, when the binaries are
 * not built; in CI (CI=true) they never skip, and ControlPlane.start() fails on missing binaries
 * instead.
 */
export const describeControlPlane: typeof describe =
  process.env.CI === 'true' || locateControlPlane() !== null
    ? describeRoot
    : (((...args: Parameters<typeof describe>) => {
        console.warn(
          'skipping the real-control-plane tests: the binaries are not built (bash scripts/install-control-plane.sh)',
        );
        return describe.skip(...args);
      }) as typeof describe);
