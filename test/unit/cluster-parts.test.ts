import { describe, expect, it } from 'vitest';
import { parseClusterParts } from '../../src/lab/cluster-parts.js';

// scripts/install-cluster.sh --locate's lines, as the cluster harness reads them.
const LOCATE = [
  'KBP_NODE_BIN=/c/k8s-node-v1.37.2',
  'KBP_CONTAINERD_BIN=/c/containerd-v2.4.2',
  'KBP_CNI_BIN=/repo/.tools/cni/bin',
  'KBP_COREDNS_BIN=/c/coredns-v1.15.0',
  'KBP_CLUSTER_IMAGES=/c/cluster-images-0123456789abcdef',
  'KBP_E2E_BIN=/c/e2e-v1.37.2',
];

describe('parseClusterParts', () => {
  it('maps each KEY=DIR line to its part, ignoring other output', () => {
    expect(
      parseClusterParts(['install-cluster: built e2e in 9 s: /c/e2e-v1.37.2', ...LOCATE, ''].join('\n')),
    ).toEqual({
      node: '/c/k8s-node-v1.37.2',
      containerd: '/c/containerd-v2.4.2',
      cni: '/repo/.tools/cni/bin',
      coredns: '/c/coredns-v1.15.0',
      images: '/c/cluster-images-0123456789abcdef',
      e2e: '/c/e2e-v1.37.2',
    });
  });

  it('is null when a part is not named', () => {
    expect(parseClusterParts(LOCATE.slice(1).join('\n'))).toBeNull();
  });
});
