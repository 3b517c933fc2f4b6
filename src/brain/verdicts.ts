// Each scope's verdict from the traffic policies and the categorized endpoints, as kube-proxy's
// proxiers decide it (pkg/proxy/iptables/proxier.go syncProxyRules: hasEndpoints, hasInternalEndpoints,
// hasExternalEndpoints; the EXT chain's short-circuit for pod and node traffic).

import type { Endpoint, ScopeVerdict, ServicePortDecision } from './types.js';

export interface ScopePolicies {
  internalPolicyLocal: boolean;
  externalPolicyLocal: boolean;
}

export type CategorizedEndpoints = Pick<
  ServicePortDecision,
  'hasAnyEndpoints' | 'clusterEndpoints' | 'localEndpoints'
>;

function verdict(local: boolean, endpoints: CategorizedEndpoints): ScopeVerdict {
  const policy = local ? 'Local' : 'Cluster';
  if (!endpoints.hasAnyEndpoints) return { policy, action: 'reject', endpoints: [] };
  const set: Endpoint[] = local ? endpoints.localEndpoints : endpoints.clusterEndpoints;
  if (local && set.length === 0) return { policy, action: 'drop', endpoints: [] };
  return { policy, action: 'forward', endpoints: set };
}

export function scopeVerdicts(
  policies: ScopePolicies,
  endpoints: CategorizedEndpoints,
): Pick<ServicePortDecision, 'internal' | 'external' | 'externalFromCluster'> {
  const external = verdict(policies.externalPolicyLocal, endpoints);
  return {
    internal: verdict(policies.internalPolicyLocal, endpoints),
    external,
    externalFromCluster:
      external.policy === 'Local' && external.action !== 'reject' ? verdict(false, endpoints) : null,
  };
}
