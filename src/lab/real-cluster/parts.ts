// Where the real cluster's parts are: the nodes' (scripts/install-cluster.sh, read by
// src/lab/cluster-parts.ts) and the control plane's (scripts/install-control-plane.sh). Both
// scripts' --locate modes name them; the harness never guesses a path.

import { fileURLToPath } from 'node:url';
import { locateClusterParts, type ClusterParts as NodeParts } from '../cluster-parts.js';
import { type ControlPlaneBinaries, locateControlPlane } from '../control-plane.js';

// The checkout's root, from src/lab/real-cluster (vitest) or dist/src/lab/real-cluster (the build).
export const ROOT = fileURLToPath(
  new URL(import.meta.url.includes('/dist/src/') ? '../../../../' : '../../../', import.meta.url),
);

export interface ClusterParts {
  dirs: NodeParts;
  controlPlane: ControlPlaneBinaries;
}

/** Every part, or an error naming the scripts that build what is missing. */
export function locateAllParts(): ClusterParts {
  const dirs = locateClusterParts();
  const controlPlane = locateControlPlane();
  if (dirs === null || controlPlane === null)
    throw new Error(
      "the cluster's parts are not all built: run bash scripts/install-cluster.sh and bash scripts/install-control-plane.sh",
    );
  return { dirs, controlPlane };
}
