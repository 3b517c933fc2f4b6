// A frontend as kbp_svc4_v1 / kbp_svc6_v1 hold it (bpf/types.h kbp_svc*_key, kbp_svc_val): the
// writer's FrontendKey and FrontendValue to and from the map's numbers and flags.

import type { BpfScheduler } from '../../config/types.js';
import type { IPFamily, Protocol } from '../../model/types.js';
import { ACTION, ALGORITHM, SCOPE, SVC_F, type SvcVal } from './layout.js';
import type { FrontendValue } from './store.js';
import type { FrontendAction, FrontendKey, FrontendKind } from './types.js';

export const IPPROTO: Record<Protocol, number> = { TCP: 6, UDP: 17, SCTP: 132 };
const PROTOCOL_OF = new Map(Object.entries(IPPROTO).map(([p, n]) => [n, p as Protocol]));
const SCHEDULER_OF = new Map<number, BpfScheduler>(
  Object.entries(ALGORITHM).map(([s, n]) => [n, s as BpfScheduler]),
);
const ACTION_OF = new Map<number, FrontendAction>(
  Object.entries(ACTION).map(([a, n]) => [n, a as FrontendAction]),
);
const KIND_FLAG: Record<FrontendKind, number> = {
  ClusterIP: 0,
  NodePort: SVC_F.NODEPORT,
  ExternalIP: SVC_F.EXTERNAL_IP,
  LoadBalancer: SVC_F.LOADBALANCER,
};

export function encodeFrontendValue(v: FrontendValue): SvcVal {
  let flags = KIND_FLAG[v.kind];
  if (v.kind !== 'ClusterIP') flags |= SVC_F.EXTERNAL;
  if (v.localOnly) flags |= SVC_F.LOCAL_ONLY;
  if (v.hasInternalScope) flags |= SVC_F.TWO_SCOPES;
  if (v.affinityTimeoutSeconds > 0) flags |= SVC_F.AFFINITY;
  if (v.checksSourceRanges) flags |= SVC_F.SOURCE_RANGE;
  return {
    svcId: v.serviceId,
    count: v.count,
    localCount: v.localCount,
    flags,
    affinityTimeoutS: v.affinityTimeoutSeconds,
    gen: v.gen,
    algorithm: ALGORITHM[v.scheduler],
    action: ACTION[v.action],
  };
}

export function decodeFrontendValue(v: SvcVal): FrontendValue {
  const kind: FrontendKind =
    v.flags & SVC_F.NODEPORT
      ? 'NodePort'
      : v.flags & SVC_F.LOADBALANCER
        ? 'LoadBalancer'
        : v.flags & SVC_F.EXTERNAL_IP
          ? 'ExternalIP'
          : 'ClusterIP';
  return {
    serviceId: v.svcId,
    count: v.count,
    localCount: v.localCount,
    gen: v.gen,
    scheduler: SCHEDULER_OF.get(v.algorithm) ?? 'random',
    action: ACTION_OF.get(v.action) ?? 'forward',
    kind,
    localOnly: (v.flags & SVC_F.LOCAL_ONLY) !== 0,
    hasInternalScope: (v.flags & SVC_F.TWO_SCOPES) !== 0,
    affinityTimeoutSeconds: v.affinityTimeoutS,
    checksSourceRanges: (v.flags & SVC_F.SOURCE_RANGE) !== 0,
  };
}

export function encodeFrontendKey(k: FrontendKey) {
  return { addr: k.address, port: k.port, proto: IPPROTO[k.protocol], scope: SCOPE[k.scope] };
}

export function decodeFrontendKey(
  k: {
    addr: string;
    port: number;
    proto: number;
    scope: number;
  },
  family: IPFamily = 'IPv4',
): FrontendKey {
  return {
    family,
    address: k.addr,
    port: k.port,
    protocol: PROTOCOL_OF.get(k.proto) ?? 'TCP',
    scope: k.scope === SCOPE.internal ? 'internal' : 'all',
  };
}
