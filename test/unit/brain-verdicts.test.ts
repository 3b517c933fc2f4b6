import { describe, expect, it } from 'vitest';
import type { Endpoint } from '../../src/brain/types.js';
import { scopeVerdicts } from '../../src/brain/verdicts.js';

const ep = (ip: string, isLocal: boolean): Endpoint => ({
  ip,
  port: 80,
  endpoint: `${ip}:80`,
  isLocal,
  ready: true,
  serving: true,
  terminating: false,
  nodeName: null,
  zoneHints: [],
  nodeHints: [],
});
const local = ep('10.1.0.1', true);
const remote = ep('10.2.0.1', false);
const both = { hasAnyEndpoints: true, clusterEndpoints: [local, remote], localEndpoints: [local] };
const remoteOnly = { hasAnyEndpoints: true, clusterEndpoints: [remote], localEndpoints: [] };
const none = { hasAnyEndpoints: false, clusterEndpoints: [], localEndpoints: [] };
const cluster = { internalPolicyLocal: false, externalPolicyLocal: false };

describe('scope verdicts (kube-proxy: hasEndpoints, hasInternalEndpoints, hasExternalEndpoints)', () => {
  it('Cluster policies forward both scopes to the cluster endpoints', () => {
    const v = scopeVerdicts(cluster, both);
    expect(v.internal).toEqual({ policy: 'Cluster', action: 'forward', endpoints: [local, remote] });
    expect(v.external).toEqual(v.internal);
    expect(v.externalFromCluster).toBeNull();
  });

  it('a port without endpoints rejects in every scope, whatever the policies', () => {
    const v = scopeVerdicts({ internalPolicyLocal: true, externalPolicyLocal: true }, none);
    expect(v.internal).toMatchObject({ policy: 'Local', action: 'reject', endpoints: [] });
    expect(v.external).toMatchObject({ policy: 'Local', action: 'reject', endpoints: [] });
    expect(v.externalFromCluster).toBeNull();
  });

  it('iTP=Local forwards ClusterIP traffic to local endpoints and drops it when there are none', () => {
    const policies = { internalPolicyLocal: true, externalPolicyLocal: false };
    expect(scopeVerdicts(policies, both).internal).toEqual({
      policy: 'Local',
      action: 'forward',
      endpoints: [local],
    });
    const v = scopeVerdicts(policies, remoteOnly);
    expect(v.internal).toEqual({ policy: 'Local', action: 'drop', endpoints: [] });
    expect(v.external).toMatchObject({ action: 'forward', endpoints: [remote] });
  });

  it('eTP=Local: external traffic to local endpoints; pods and the node short-circuit to the cluster ones', () => {
    const policies = { internalPolicyLocal: false, externalPolicyLocal: true };
    const v = scopeVerdicts(policies, both);
    expect(v.external).toEqual({ policy: 'Local', action: 'forward', endpoints: [local] });
    expect(v.externalFromCluster).toEqual({
      policy: 'Cluster',
      action: 'forward',
      endpoints: [local, remote],
    });
    const dropped = scopeVerdicts(policies, remoteOnly);
    expect(dropped.external.action).toBe('drop');
    expect(dropped.externalFromCluster).toMatchObject({ action: 'forward', endpoints: [remote] });
  });
});
